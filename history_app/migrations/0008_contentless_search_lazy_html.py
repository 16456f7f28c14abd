"""Issue #13: SQLite's search index keeps no second copy of the text, and a run's answer
is rendered to HTML when it is first shown, not at ingestion.

On SQLite the FTS5 table becomes contentless (``content=''``): it is filled from the runs'
rows and ``history_app_runsearch`` is emptied (it stays, for PostgreSQL, where it
holds the documents and their tsvector). Deleting a run from a contentless index needs the
text it was indexed with: ``search.stored_documents`` rebuilds it from the run's rows.
"""

from django.db import migrations, models

TOKENIZE = "tokenize='unicode61 remove_diacritics 2'"
SQLITE_FORWARD = [
    f"CREATE VIRTUAL TABLE history_run_fts_new USING fts5(document, content='', {TOKENIZE})",
    "DROP TRIGGER history_run_fts_au",
    "DROP TRIGGER history_run_fts_ad",
    "DROP TRIGGER history_run_fts_ai",
    "DROP TABLE history_run_fts",
    "ALTER TABLE history_run_fts_new RENAME TO history_run_fts",
    "DELETE FROM history_app_runsearch",
]
# Back to the external-content index of 0004; its documents are then empty until
# ``manage.py reindex_search`` (run it after migrating backwards).
SQLITE_BACKWARD = [
    "DROP TABLE history_run_fts",
    "CREATE VIRTUAL TABLE history_run_fts USING fts5(document, content='history_app_runsearch', "
    f"content_rowid='run_id', {TOKENIZE})",
    "CREATE TRIGGER history_run_fts_ai AFTER INSERT ON history_app_runsearch BEGIN "
    "INSERT INTO history_run_fts(rowid, document) VALUES (new.run_id, new.document); END",
    "CREATE TRIGGER history_run_fts_ad AFTER DELETE ON history_app_runsearch BEGIN "
    "INSERT INTO history_run_fts(history_run_fts, rowid, document) VALUES ('delete', old.run_id, old.document); END",
    "CREATE TRIGGER history_run_fts_au AFTER UPDATE ON history_app_runsearch BEGIN "
    "INSERT INTO history_run_fts(history_run_fts, rowid, document) VALUES ('delete', old.run_id, old.document); "
    "INSERT INTO history_run_fts(rowid, document) VALUES (new.run_id, new.document); END",
]


def _fill(apps, schema_editor):
    """The new index filled from the runs' rows (not from the stored documents: the
    document is now built from the values as stored, which is what a delete rebuilds)."""
    if schema_editor.connection.vendor != "sqlite":
        return
    from history_app.store import search

    class Models:
        Run = apps.get_model("history_app", "Run")
        Iteration = apps.get_model("history_app", "Iteration")
        ToolCall = apps.get_model("history_app", "ToolCall")
        MemberInteraction = apps.get_model("history_app", "MemberInteraction")

    pks = list(Models.Run.objects.order_by("pk").values_list("pk", flat=True))
    with schema_editor.connection.cursor() as cursor:
        for start in range(0, len(pks), 500):
            cursor.executemany(
                "INSERT INTO history_run_fts_new(rowid, document) VALUES (%s, %s)",
                search.documents_from_rows(pks[start : start + 500], Models),
            )


def _render_all(apps, schema_editor):
    """Backwards: the versions before this one show ``output_html`` as it is stored."""
    from history_app.reading.rendering import render_markdown

    Run = apps.get_model("history_app", "Run")
    for run in Run.objects.filter(output_html__isnull=True).only("id", "output").iterator():
        Run.objects.filter(pk=run.pk).update(output_html=render_markdown(run.output))


def _run(statements):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            for statement in statements:
                schema_editor.execute(statement)

    return apply


class Migration(migrations.Migration):
    dependencies = [
        ("history_app", "0007_provenance_fingerprints"),
    ]

    operations = [
        migrations.AlterField(
            model_name="run",
            name="output_html",
            field=models.TextField(
                blank=True,
                null=True,
                help_text="The output as sanitised HTML, rendered when the run is first shown (null until then).",
            ),
        ),
        migrations.RunPython(migrations.RunPython.noop, _render_all),
        migrations.RunPython(_run(SQLITE_FORWARD[:1]), _run(SQLITE_BACKWARD)),
        migrations.RunPython(_fill, migrations.RunPython.noop),
        migrations.RunPython(_run(SQLITE_FORWARD[1:]), migrations.RunPython.noop),
    ]
