from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("web", "0015_frontierurl_banned_since"),
    ]

    operations = [
        migrations.AddField(
            model_name="frontierurl",
            name="priority",
            field=models.SmallIntegerField(
                db_default=0,
                default=0,
                help_text="A spider request's priority: higher is released first, then shallower.",
            ),
        ),
        migrations.AddIndex(
            model_name="frontierurl",
            index=models.Index(
                condition=models.Q(("state__in", ("queued", "scheduled", "leased"))),
                fields=["job", "state", "-priority", "depth", "id"],
                name="frontier_pending_rank",
            ),
        ),
        migrations.RemoveIndex(
            model_name="frontierurl",
            name="frontier_pending_order",
        ),
    ]
