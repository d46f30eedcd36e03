from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("web", "0016_frontierurl_priority"),
    ]

    operations = [
        migrations.AddField(
            model_name="crawljob",
            name="close_reason",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="Why the spider ended this run early (CloseSpider): nothing more is fetched.",
                max_length=200,
            ),
        ),
    ]
