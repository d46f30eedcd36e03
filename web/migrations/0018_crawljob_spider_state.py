from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("web", "0017_crawljob_close_reason"),
    ]

    operations = [
        migrations.AddField(
            model_name="crawljob",
            name="spider_state",
            field=models.JSONField(
                blank=True,
                db_default={},
                default=dict,
                help_text="Attributes the spider's start() set (JSON), given to the spider in "
                "every worker, as a Scrapy spider's one process keeps them.",
            ),
        ),
    ]
