from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("web", "0014_crawljob_skip_tls_verify"),
    ]

    operations = [
        migrations.AddField(
            model_name="frontierurl",
            name="banned_since",
            field=models.DateTimeField(
                blank=True,
                help_text="When its current run of refusals began (its identities banned, "
                "attempts given back); it is parked after BAN_GIVE_UP_S of them.",
                null=True,
            ),
        ),
    ]
