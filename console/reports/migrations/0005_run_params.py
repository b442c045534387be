from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("reports", "0004_run_node")]

    operations = [
        migrations.AddField(
            model_name="reportrun",
            name="params",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
