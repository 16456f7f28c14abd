"""Iterations of runs assembled from OpenTelemetry spans numbered from 1, as every other
source's are (issue #33): they were numbered from 0. Each run that has an iteration 0 has
all its iterations, and the judgements made on them (``Annotation.iteration_index``),
moved up by one. The run page keeps the old anchor ``#iteration-0`` as an alias of the
first iteration of such a run, so that a link saved before still lands on it."""

from django.db import migrations
from django.db.models import F


def renumber(apps, schema_editor):
    Run = apps.get_model("history_app", "Run")
    Iteration = apps.get_model("history_app", "Iteration")
    Annotation = apps.get_model("history_app", "Annotation")
    runs = Run.objects.filter(source_format="otlp", iterations__index=0).values_list("pk", flat=True)
    pks = list(runs.distinct())
    for start in range(0, len(pks), 500):
        chunk = pks[start : start + 500]
        Iteration.objects.filter(run_id__in=chunk).update(index=F("index") + 1)
        Annotation.objects.filter(run_id__in=chunk, iteration_index__isnull=False).update(
            iteration_index=F("iteration_index") + 1
        )


def number_from_zero(apps, schema_editor):
    Run = apps.get_model("history_app", "Run")
    Iteration = apps.get_model("history_app", "Iteration")
    Annotation = apps.get_model("history_app", "Annotation")
    pks = list(
        Run.objects.filter(source_format="otlp", iterations__index=1)
        .exclude(iterations__index=0)
        .values_list("pk", flat=True)
        .distinct()
    )
    for start in range(0, len(pks), 500):
        chunk = pks[start : start + 500]
        Iteration.objects.filter(run_id__in=chunk).update(index=F("index") - 1)
        Annotation.objects.filter(run_id__in=chunk, iteration_index__isnull=False).update(
            iteration_index=F("iteration_index") - 1
        )


class Migration(migrations.Migration):
    dependencies = [("history_app", "0024_receipt_stored_runs")]

    operations = [migrations.RunPython(renumber, number_from_zero)]
