from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('web', '0013_spiders_items'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='crawljob',
            options={'ordering': ['-id'], 'permissions': [('change_crawl_network', 'Can let a job reach networks beyond public addresses'), ('pin_crawl_channel', 'Can pin a job to a release channel'), ('raise_crawl_priority', 'Can give a job a priority above the default band'), ('skip_tls_verify', 'Can let a job fetch without checking TLS certificates')]},
        ),
    ]
