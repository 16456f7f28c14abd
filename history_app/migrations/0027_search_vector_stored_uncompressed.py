"""PostgreSQL: the search index's stored ``tsvector`` is kept out of line without trying
to compress it (``STORAGE EXTERNAL``).

A run's vector (about 14 KB for the standard shape) is over the TOAST threshold, so every
insert handed it to pglz, which never got it small enough to keep (none of them is stored
compressed: their lexemes and positions do not repeat): 0.15 ms of server time a run,
about a sixteenth of what PostgreSQL spent on each ingested run, for nothing. The values
stay where and as they were; only new values skip the attempt. SQLite has no such column.
"""

from django.db import migrations


def external(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE history_app_runsearch ALTER COLUMN tsv SET STORAGE EXTERNAL")


def extended(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE history_app_runsearch ALTER COLUMN tsv SET STORAGE EXTENDED")


class Migration(migrations.Migration):
    dependencies = [
        ("history_app", "0026_alter_injectedcontext_kind"),
    ]

    operations = [migrations.RunPython(external, extended)]
