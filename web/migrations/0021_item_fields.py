from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("web", "0020_frontierurl_banned_since_patience"),
    ]

    operations = [
        migrations.AddField(
            model_name="item",
            name="fields",
            field=models.JSONField(
                blank=True,
                null=True,
                help_text="Its field names in the order feeds write them (an Item's or a "
                "dataclass's declared fields, a dict's keys), with the key order of the "
                "objects its values hold: PostgreSQL's jsonb keeps none. Empty: the data's "
                "order.",
            ),
        ),
    ]
