"""A session's annotation facets: one value a name ("name:<name>", for its scores and
labels of that name) instead of "score:<name>" and "label:<name>", so the ``annotated``
filter probes one index entry a session. Rebuilt from the annotations."""

from django.db import migrations


def rebuild(apps, schema_editor):
    from history_app.store import rollups

    schema_editor.execute("DELETE FROM history_app_sessionfacet WHERE facet = 'annotation'")
    schema_editor.execute(
        "INSERT INTO history_app_sessionfacet (session_id, facet, value) "
        + rollups.ANNOTATION_FACETS_SQL.format(where="1 = 1")
    )
    if schema_editor.connection.vendor == "postgresql":
        # New values the planner has no statistics for until autovacuum comes by: it took
        # the filter on one for rare and planned a scan (323 ms at a million runs).
        schema_editor.execute("ANALYZE history_app_sessionfacet")


class Migration(migrations.Migration):

    dependencies = [
        ("history_app", "0020_annotation_token"),
    ]

    operations = [migrations.RunPython(rebuild, migrations.RunPython.noop)]
