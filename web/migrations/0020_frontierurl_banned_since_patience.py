from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("web", "0019_spider_stats"),
    ]

    operations = [
        migrations.AlterField(
            model_name="frontierurl",
            name="banned_since",
            field=models.DateTimeField(
                blank=True,
                help_text="When its current run of refusals began (its identities banned, "
                "attempts given back); it is parked as banned after BAN_PATIENCE_S of them.",
                null=True,
            ),
        ),
    ]
