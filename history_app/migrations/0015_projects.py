"""Projects and members (issue #16). Everything stored so far moves into the "default"
project; session and run ids become unique within a project instead of everywhere.

Users who could read every session before keep reading the default project's: staff users
become its admins, the others its editors (they could export before, which is an editor's
right now). Superusers need no membership: they act as admins of every project."""

import django.db.models.deletion
import django.db.models.functions.comparison
from django.conf import settings
from django.db import migrations, models

# Tables given a project: every row already stored is the default project's.
PROJECT_TABLES = (
    "session",
    "run",
    "ingesttoken",
    "ingestreceipt",
    "spanbatch",
    "dailystat",
    "dailyusage",
    "dailylatency",
)


def into_the_default_project(apps, schema_editor):
    project_model = apps.get_model("history_app", "Project")
    project, _ = project_model.objects.get_or_create(slug="default", defaults={"name": "Default"})
    for name in PROJECT_TABLES:
        apps.get_model("history_app", name).objects.update(project=project)
    membership = apps.get_model("history_app", "Membership")
    user_model = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    membership.objects.bulk_create(
        membership(project=project, user=user, role="admin" if user.is_staff else "editor")
        for user in user_model.objects.filter(is_superuser=False, is_active=True)
    )


def _project_field(null: bool = False) -> models.ForeignKey:
    return models.ForeignKey(
        null=null, on_delete=django.db.models.deletion.CASCADE, related_name="+", to="history_app.project"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("history_app", "0014_audit_events"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Project",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("slug", models.SlugField(unique=True)),
                ("name", models.CharField(max_length=100)),
                (
                    "retention_days",
                    models.PositiveIntegerField(
                        blank=True,
                        null=True,
                        help_text="Prune unpinned sessions idle longer than this; empty: HISTORY_RETENTION_DAYS.",
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={"ordering": ["name", "slug"]},
        ),
        migrations.CreateModel(
            name="Membership",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "role",
                    models.CharField(
                        choices=[("viewer", "viewer"), ("editor", "editor"), ("admin", "admin")],
                        default="viewer",
                        max_length=16,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to="history_app.project",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["project", "user"],
                "constraints": [
                    models.UniqueConstraint(fields=("project", "user"), name="membership_project_user_uniq")
                ],
            },
        ),
        # The columns, empty at first; every stored row is then the default project's.
        *[
            migrations.AddField(model_name=name, name="project", field=_project_field(null=True))
            for name in PROJECT_TABLES
        ],
        migrations.AddField(
            model_name="auditevent",
            name="project",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="history_app.project",
            ),
        ),
        migrations.AddField(
            model_name="prunelog",
            name="project",
            field=models.ForeignKey(
                blank=True,
                help_text="Empty: every project.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="history_app.project",
            ),
        ),
        migrations.RunPython(into_the_default_project, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="session",
            name="project",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="sessions", to="history_app.project"
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="project",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT, related_name="+", to="history_app.project"
            ),
        ),
        migrations.AlterField(
            model_name="ingesttoken",
            name="project",
            field=models.ForeignKey(
                help_text="Where its runs go and what it reads.",
                on_delete=django.db.models.deletion.CASCADE,
                related_name="tokens",
                to="history_app.project",
            ),
        ),
        *[
            migrations.AlterField(model_name=name, name="project", field=_project_field())
            for name in ("ingestreceipt", "spanbatch", "dailystat", "dailyusage", "dailylatency")
        ],
        # Ids unique within a project.
        migrations.AlterField(
            model_name="session", name="session_id", field=models.CharField(db_index=True, max_length=255)
        ),
        migrations.AlterField(model_name="run", name="run_id", field=models.CharField(db_index=True, max_length=255)),
        migrations.AddConstraint(
            model_name="session",
            constraint=models.UniqueConstraint(fields=("project", "session_id"), name="session_project_id_uniq"),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(fields=("project", "run_id"), name="run_project_id_uniq"),
        ),
        # A project's pages walk indexes that lead with the project.
        *[
            migrations.RemoveIndex(model_name=model, name=name)
            for model, name in (
                ("session", "session_activity_idx"),
                ("session", "session_runs_idx"),
                ("session", "session_failures_idx"),
                ("session", "session_framework_idx"),
                ("run", "run_status_idx"),
                ("run", "run_when_duration_idx"),
                ("run", "run_status_when_idx"),
            )
        ],
        migrations.AddIndex(
            model_name="session",
            index=models.Index(fields=["project", "-last_activity_at", "-id"], name="session_activity_idx"),
        ),
        migrations.AddIndex(
            model_name="session", index=models.Index(fields=["last_activity_at"], name="session_activity_all_idx")
        ),
        migrations.AddIndex(
            model_name="session",
            index=models.Index(fields=["project", "-run_count", "-id"], name="session_runs_idx"),
        ),
        migrations.AddIndex(
            model_name="session",
            index=models.Index(fields=["project", "-failed_count", "-id"], name="session_failures_idx"),
        ),
        migrations.AddIndex(
            model_name="session", index=models.Index(fields=["project", "framework"], name="session_framework_idx")
        ),
        migrations.AddIndex(model_name="run", index=models.Index(fields=["project", "status"], name="run_status_idx")),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                models.F("project"),
                django.db.models.functions.comparison.Coalesce("started_at", "received_at"),
                models.F("duration_ms"),
                name="run_when_duration_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                models.F("project"),
                models.F("status"),
                django.db.models.functions.comparison.Coalesce("started_at", "received_at"),
                name="run_status_when_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="ingestreceipt",
            index=models.Index(fields=["project", "-created_at", "-id"], name="receipt_project_created_idx"),
        ),
        # Span batches are found by project and trace.
        migrations.AlterField(model_name="spanbatch", name="trace_id", field=models.CharField(max_length=32)),
        migrations.AddIndex(
            model_name="spanbatch",
            index=models.Index(fields=["project", "trace_id"], name="spanbatch_project_trace_idx"),
        ),
        # The daily rollups are kept per project.
        migrations.RemoveConstraint(model_name="dailystat", name="dailystat_day_tool_uniq"),
        migrations.AddConstraint(
            model_name="dailystat",
            constraint=models.UniqueConstraint(fields=("project", "day", "tool"), name="dailystat_day_tool_uniq"),
        ),
        migrations.RemoveConstraint(model_name="dailyusage", name="dailyusage_day_model_agent_uniq"),
        migrations.AddConstraint(
            model_name="dailyusage",
            constraint=models.UniqueConstraint(
                fields=("project", "day", "model", "agent"), name="dailyusage_day_model_agent_uniq"
            ),
        ),
        migrations.RemoveConstraint(model_name="dailylatency", name="dailylatency_day_kind_bucket_uniq"),
        migrations.AddConstraint(
            model_name="dailylatency",
            constraint=models.UniqueConstraint(
                fields=("project", "day", "kind", "bucket"), name="dailylatency_day_kind_bucket_uniq"
            ),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="action",
            field=models.CharField(
                choices=[
                    ("token_created", "token created"),
                    ("token_revoked", "token revoked"),
                    ("member_added", "member added"),
                    ("role_changed", "role changed"),
                    ("member_removed", "member removed"),
                    ("retention_changed", "retention changed"),
                    ("project_created", "project created"),
                    ("session_deleted", "session deleted"),
                    ("pinned", "sessions pinned"),
                    ("unpinned", "sessions unpinned"),
                    ("pruned", "sessions pruned"),
                ],
                max_length=32,
            ),
        ),
    ]
