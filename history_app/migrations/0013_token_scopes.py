"""Token scopes (issue #16). Tokens made before scopes could write and read the JSON API:
they keep both, so nothing that worked stops working; new tokens get what they are given."""

from django.db import migrations, models


def existing_tokens_keep_what_they_could_do(apps, schema_editor):
    token = apps.get_model("history_app", "IngestToken")
    token.objects.update(scopes=["ingest", "read"])


class Migration(migrations.Migration):
    dependencies = [
        ("history_app", "0012_otlp_span_batches"),
    ]

    operations = [
        migrations.AddField(
            model_name="ingesttoken",
            name="scopes",
            field=models.JSONField(default=list, help_text="What the token may do: ingest, read, annotate."),
        ),
        migrations.RunPython(existing_tokens_keep_what_they_could_do, migrations.RunPython.noop),
    ]
