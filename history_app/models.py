"""Stored agent history: sessions, runs and everything a run contains.

Sessions and runs are addressed by their external ids (``session_id``, ``run_id``) in
URLs and APIs; the integer primary keys are internal. Every child table carries ``run``
directly, so a page fetches a run's iterations, tool calls, interactions and contexts in
one query each, and every large table reaches its session in one join (the natural
distribution key if a deployment ever partitions by session).
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import F
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone

from history_app.agent_history.records import CONTEXT_KINDS, CONTEXT_TARGETS, RUN_KINDS, RUN_STATUSES


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(v, v.replace("_", " ")) for v in values]


class Project(models.Model):
    """A team's own space (issue #16): every session belongs to one, and session and run
    ids are unique within it. Its slug is in every page's URL and never changes once
    created (links and bookmarks hold it)."""

    DEFAULT_SLUG = "default"

    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100)
    retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Prune unpinned sessions idle longer than this; empty: HISTORY_RETENTION_DAYS.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "slug"]

    def __str__(self) -> str:
        return self.name or self.slug

    @classmethod
    def default(cls) -> Project:
        """The default project (created when missing): where runs go when nothing says
        otherwise, and where ``quickstart`` puts its demo."""
        project, _ = cls.objects.get_or_create(slug=cls.DEFAULT_SLUG, defaults={"name": "Default"})
        return project

    def effective_retention_days(self) -> int | None:
        return self.retention_days if self.retention_days is not None else settings.HISTORY_RETENTION_DAYS


class Membership(models.Model):
    """A user's role in a project: viewer (reads), editor (and pins, annotates, exports),
    admin (and manages tokens, members, retention and deletions). Superusers act as admins
    of every project without a membership."""

    VIEWER, EDITOR, ADMIN = "viewer", "editor", "admin"
    ROLES = [(VIEWER, "viewer"), (EDITOR, "editor"), (ADMIN, "admin")]
    RANK = {VIEWER: 1, EDITOR: 2, ADMIN: 3}

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=ROLES, default=VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "user"]
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="membership_project_user_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} of {self.project}"


class Session(models.Model):
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="sessions")
    session_id = models.CharField(max_length=255, db_index=True)
    user_id = models.CharField(max_length=255, blank=True, db_index=True)
    framework = models.CharField(max_length=32, blank=True)
    agent_name = models.CharField(
        max_length=255, blank=True, help_text="Agent, team or workflow of the latest run."
    )
    run_count = models.PositiveIntegerField(default=0)
    failed_count = models.PositiveIntegerField(default=0)
    last_status = models.CharField(max_length=16, blank=True)
    first_started_at = models.DateTimeField(null=True, blank=True)
    # The latest time the agent reported for any of its runs, falling back to when we
    # received the run: sessions are listed, and pruned, by this indexed column.
    last_activity_at = models.DateTimeField(db_index=True)
    pinned = models.BooleanField(default=False, help_text="Pinned sessions are never pruned.")
    # Its runs' model calls, summed (issue #14): the sessions list shows them.
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.FloatField(null=True, blank=True, help_text="US dollars; null while no call has a price.")
    timed_runs = models.PositiveIntegerField(default=0)
    duration_total_ms = models.BigIntegerField(default=0)
    # Its runs' annotations (scores, labels, comments): the list sorts on it.
    annotation_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "session_id"], name="session_project_id_uniq")
        ]
        indexes = [
            # A project's list, in each of its sorts, walks an index whatever the number of
            # sessions; pruning walks the activity one across projects.
            models.Index(fields=["project", "-last_activity_at", "-id"], name="session_activity_idx"),
            models.Index(fields=["last_activity_at"], name="session_activity_all_idx"),
            models.Index(fields=["project", "-run_count", "-id"], name="session_runs_idx"),
            models.Index(fields=["project", "-failed_count", "-id"], name="session_failures_idx"),
            models.Index(fields=["project", "-annotation_count", "-id"], name="session_annotations_idx"),
            models.Index(fields=["project", "framework"], name="session_framework_idx"),
        ]

    def __str__(self) -> str:
        return self.session_id

    def get_absolute_url(self) -> str:
        """Its page. Reads its project unless loaded: a page that lists many links with
        ``{% url %}`` and the page's own project instead."""
        return reverse("history_app:session_detail", args=[self.project.slug, self.session_id])

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def mean_duration_ms(self) -> int | None:
        """The mean duration of its runs that have one."""
        return round(self.duration_total_ms / self.timed_runs) if self.timed_runs else None

    @property
    def span_ms(self) -> int | None:
        """From its first run's start to its last activity."""
        if self.first_started_at is None or self.last_activity_at < self.first_started_at:
            return None
        return round((self.last_activity_at - self.first_started_at).total_seconds() * 1000)


class Run(models.Model):
    # Its session's project, kept on the run too: run ids are unique within a project.
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    run_id = models.CharField(max_length=255, db_index=True)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="runs")
    # Not a foreign key: a member run may arrive before the team run that spawned it.
    parent_run_id = models.CharField(max_length=255, null=True, blank=True, db_index=True)
    kind = models.CharField(max_length=16, choices=_choices(RUN_KINDS), default="agent")
    status = models.CharField(max_length=16, choices=_choices(RUN_STATUSES), default="completed")
    agent_name = models.CharField(max_length=255, blank=True)
    team_id = models.CharField(max_length=255, blank=True)
    workflow_id = models.CharField(max_length=255, blank=True)
    user_id = models.CharField(max_length=255, blank=True)
    framework = models.CharField(max_length=32, blank=True)
    input = models.TextField(blank=True)
    output = models.TextField(null=True, blank=True)
    output_html = models.TextField(
        blank=True,
        null=True,
        help_text="The output as sanitised HTML, rendered when the run is first shown (null until then).",
    )
    error = models.TextField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.BigIntegerField(null=True, blank=True)
    iteration_count = models.PositiveIntegerField(default=0)
    tool_call_count = models.PositiveIntegerField(default=0)
    tool_error_count = models.PositiveIntegerField(default=0)
    # Its model calls, summed (issue #14).
    model_call_count = models.PositiveIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.FloatField(null=True, blank=True, help_text="US dollars; null while no call has a price.")
    unpriced_calls = models.PositiveIntegerField(default=0, help_text="Calls with tokens but no price.")
    metrics = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    redactions = models.JSONField(default=dict, blank=True)
    source_format = models.CharField(max_length=32, blank=True)
    content_hash = models.CharField(max_length=64)
    received_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "run_id"], name="run_project_id_uniq")]
        indexes = [
            models.Index(fields=["session", "started_at", "id"], name="run_session_order_idx"),
            models.Index(fields=["project", "status"], name="run_status_idx"),
            # The stats page's window, on when a run started (else was received): its
            # durations, and its failed runs' errors, read from the index.
            models.Index(
                F("project"),
                Coalesce("started_at", "received_at"),
                F("duration_ms"),
                name="run_when_duration_idx",
            ),
            models.Index(
                F("project"), F("status"), Coalesce("started_at", "received_at"), name="run_status_when_idx"
            ),
        ]

    def __str__(self) -> str:
        return self.run_id

    def get_absolute_url(self) -> str:
        """Its page. Reads its project unless loaded: a page that lists many links with
        ``{% url %}`` and the page's own project instead."""
        return reverse("history_app:run_detail", args=[self.project.slug, self.run_id])

    @property
    def redaction_total(self) -> int:
        return sum(v for v in self.redactions.values() if isinstance(v, int))

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class Iteration(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="iterations")
    position = models.PositiveIntegerField()
    index = models.IntegerField(help_text="The iteration number the agent reported.")
    name = models.CharField(max_length=255, blank=True)
    thought = models.TextField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="iteration_run_position_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.index}"


class ToolCall(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tool_calls")
    iteration = models.ForeignKey(Iteration, on_delete=models.CASCADE, related_name="tool_calls")
    position = models.PositiveIntegerField()
    tool = models.CharField(max_length=255)
    call_id = models.CharField(max_length=255, blank=True)
    # JSON text, not a JSONField: PostgreSQL's jsonb reorders keys, and a person reading a
    # tool call wants the parameters in the order the agent sent them.
    params_json = models.TextField(default="null")
    result = models.TextField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["iteration_id", "position"]
        indexes = [models.Index(fields=["tool"], name="toolcall_tool_idx")]

    def __str__(self) -> str:
        return self.tool

    @property
    def params(self) -> object:
        return json.loads(self.params_json)


class ModelCall(models.Model):
    """One call to a model (issue #14): in an iteration, or the run's own when it is in
    none. ``position`` orders all of a run's calls (iterations' first, then the run's); the
    pages number them from 1."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="model_calls")
    iteration = models.ForeignKey(
        Iteration, null=True, blank=True, on_delete=models.CASCADE, related_name="model_calls"
    )
    position = models.PositiveIntegerField()
    model = models.CharField(max_length=255, blank=True)
    provider = models.CharField(max_length=255, blank=True)
    # JSON text, as tool parameters: the messages in the order the model received them.
    messages_json = models.TextField(default="[]")
    message_count = models.PositiveIntegerField(default=0)
    output = models.TextField(null=True, blank=True)
    finish_reason = models.CharField(max_length=64, blank=True)
    # JSON text of the answer as a message (its text, parts, tool-call requests); "" for
    # calls stored before it was kept, whose answer is ``output`` alone.
    answer_json = models.TextField(blank=True, default="")
    api = models.CharField(max_length=32, blank=True, help_text="chat.completions, responses, or unknown.")
    messages_source = models.CharField(max_length=64, blank=True)
    input_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    cached_tokens = models.BigIntegerField(null=True, blank=True)
    reasoning_tokens = models.BigIntegerField(null=True, blank=True)
    cost = models.FloatField(null=True, blank=True, help_text="US dollars.")
    cost_source = models.CharField(max_length=16, blank=True)
    price_source = models.CharField(max_length=255, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.BigIntegerField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="modelcall_run_position_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.model or 'model'} call {self.position + 1} of {self.run_id}"

    @property
    def number(self) -> int:
        return self.position + 1

    @property
    def messages(self) -> list:
        return json.loads(self.messages_json)

    @property
    def answer(self) -> dict | None:
        """The answer as a message's dict, or None for a call stored with ``output`` only."""
        return json.loads(self.answer_json) if self.answer_json else None

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)


class MemberInteraction(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="member_interactions")
    position = models.PositiveIntegerField()
    member = models.CharField(max_length=255)
    task = models.TextField(blank=True)
    response = models.TextField(blank=True)
    member_run_id = models.CharField(max_length=255, null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["position"]

    def __str__(self) -> str:
        return self.member


class InjectedContext(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="injected_contexts")
    position = models.PositiveIntegerField()
    step = models.CharField(max_length=255, blank=True)
    target = models.CharField(max_length=16, choices=_choices(CONTEXT_TARGETS), default="system")
    kind = models.CharField(max_length=32, choices=_choices(CONTEXT_KINDS), default="custom")
    text = models.TextField()
    source_run_ids = models.JSONField(default=list, blank=True)
    settings = models.JSONField(default=dict, blank=True)
    reported = models.BooleanField(
        default=True, help_text="False when reconstructed rather than reported by the agent."
    )

    class Meta:
        ordering = ["position"]
        # The run page reads a run's contexts a slice at a time, in position order.
        indexes = [models.Index(fields=["run", "position"], name="context_run_position_idx")]

    def __str__(self) -> str:
        return f"{self.kind} for {self.step or 'run'}"

    @property
    def number(self) -> int:
        """Its number in the run, from 1, as its inspector's URL gives it."""
        return self.position + 1


class Annotation(models.Model):
    """A judgement on a run or on one of its iterations (issue #18): a score (numeric, or
    categorical in ``text``) with a ``name`` ("correct", "helpfulness"), a label (its
    ``name``), or a comment (``text``); who wrote it and when. Written by editors on the
    run page and by tokens with the ``annotate`` scope through the JSON API; its text is
    redacted like every stored text."""

    SCORE, LABEL, COMMENT = "score", "label", "comment"
    KINDS = (SCORE, LABEL, COMMENT)

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="annotations")
    # The iteration as the agent numbered it (``Iteration.index``); none for the whole run.
    # A number, not a key: a run sent again rewrites its iterations, and its judgements stay.
    iteration_index = models.IntegerField(null=True, blank=True)
    kind = models.CharField(max_length=16, choices=[(k, k) for k in KINDS])
    name = models.CharField(max_length=64, blank=True)
    value = models.FloatField(null=True, blank=True, help_text="A numeric score.")
    text = models.TextField(blank=True, help_text="A categorical score's value, or a comment.")
    author = models.CharField(max_length=255, help_text='A username, or "token:<name>".')
    # The token that wrote it (through the API), which may take it back: names repeat.
    token = models.ForeignKey(
        "IngestToken", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Where a score is counted in ``DailyScore``: its run's day and agent when it was
    # written (kept here, so taking it off takes off exactly what was added).
    day = models.DateField(null=True, blank=True)
    agent = models.CharField(max_length=255, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["run", "created_at"], name="annotation_run_idx"),
            models.Index(fields=["project", "kind", "name"], name="annotation_name_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}".strip()

    @property
    def shown_value(self) -> str:
        """The score as a reader sees it: 0.75, 1, "pass"."""
        if self.value is not None:
            return f"{self.value:g}"
        return self.text


class RunFingerprint(models.Model):
    """What a run leaves in a history block, fingerprinted (``provenance.py``): one row per
    block kind, layout and form (ours neutralised, agno's verbatim) that differ. Filled
    when the run is stored; ``manage.py relink_contexts`` fills it for older databases."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="fingerprints")
    # The run's session, so that linking looks up one session's fingerprints in one index.
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="+")
    fingerprint = models.CharField(max_length=64)

    class Meta:
        indexes = [models.Index(fields=["session", "fingerprint"], name="runfp_session_fp_idx")]

    def __str__(self) -> str:
        return f"{self.fingerprint[:12]}… of {self.run_id}"


class ContextEntry(models.Model):
    """One entry of a history block that the server links (an injected context whose
    agent reported no sources): its place in the block, the fingerprint of its text, and
    the run it came from once exactly one run of the session has that fingerprint.
    ``InjectedContext.source_run_ids`` is these ``source_run_id`` values in block order."""

    context = models.ForeignKey(InjectedContext, on_delete=models.CASCADE, related_name="entries")
    # The run the context was sent in, and its session (the lookup's index).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="+")
    position = models.PositiveIntegerField()
    fingerprint = models.CharField(max_length=64)
    source_run_id = models.CharField(max_length=255, null=True, blank=True)

    class Meta:
        ordering = ["context_id", "position"]
        indexes = [models.Index(fields=["session", "fingerprint"], name="ctxentry_session_fp_idx")]

    def __str__(self) -> str:
        return f"entry {self.position} of context {self.context_id}"


class RunSearch(models.Model):
    """A run's full-text search document (see ``search.py``), on PostgreSQL, where a GIN
    index over its tsvector finds it (migration 0004). SQLite keeps no copy: its FTS5 index
    is contentless (migration 0008), and this table stays empty there."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="search")
    document = models.TextField()

    def __str__(self) -> str:
        return f"search document of {self.run_id}"


class IngestToken(models.Model):
    """A bearer token for the JSON API. Only its SHA-256 is stored. Its scopes say what it
    may do: ``ingest`` (write runs and spans, nothing else), ``read`` (the JSON API's
    reads), ``annotate`` (scores and comments, reserved for annotations)."""

    INGEST, READ, ANNOTATE = "ingest", "read", "annotate"
    SCOPES = (INGEST, READ, ANNOTATE)

    project = models.ForeignKey(
        Project,
        on_delete=models.CASCADE,
        related_name="tokens",
        help_text="Where its runs go and what it reads.",
    )
    name = models.CharField(max_length=100)
    scopes = models.JSONField(default=list, help_text="What the token may do: ingest, read, annotate.")
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12, help_text="The first characters, to recognise a token.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def allows(self, scope: str) -> bool:
        return scope in self.scopes

    @staticmethod
    def hash(token: str) -> str:
        return hashlib.sha256(token.encode("utf-8")).hexdigest()


class AuditEvent(models.Model):
    """Who did what to access or data, and when: tokens created and revoked, sessions
    deleted, pinned and unpinned, prunes (whose counts are in their ``PruneLog``)."""

    TOKEN_CREATED, TOKEN_REVOKED = "token_created", "token_revoked"
    MEMBER_ADDED, ROLE_CHANGED, MEMBER_REMOVED = "member_added", "role_changed", "member_removed"
    RETENTION_CHANGED, PROJECT_CREATED = "retention_changed", "project_created"
    SESSION_DELETED, SESSIONS_PINNED, SESSIONS_UNPINNED, PRUNED = (
        "session_deleted",
        "pinned",
        "unpinned",
        "pruned",
    )
    ACTIONS = [
        (TOKEN_CREATED, "token created"),
        (TOKEN_REVOKED, "token revoked"),
        (MEMBER_ADDED, "member added"),
        (ROLE_CHANGED, "role changed"),
        (MEMBER_REMOVED, "member removed"),
        (RETENTION_CHANGED, "retention changed"),
        (PROJECT_CREATED, "project created"),
        (SESSION_DELETED, "session deleted"),
        (SESSIONS_PINNED, "sessions pinned"),
        (SESSIONS_UNPINNED, "sessions unpinned"),
        (PRUNED, "sessions pruned"),
    ]

    at = models.DateTimeField(default=timezone.now, db_index=True)
    # The project acted in (none for what spans projects: a prune of every project's
    # sessions records one event per project it touched).
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor = models.CharField(max_length=150, help_text="A user name, or the command or trigger that acted.")
    action = models.CharField(max_length=32, choices=ACTIONS)
    target = models.CharField(max_length=255, blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.get_action_display()} by {self.actor} at {self.at:%Y-%m-%d %H:%M:%S}"


class PruneLog(models.Model):
    """Audit of every prune: who, when, by which criteria, and what it removed."""

    TRIGGERS = [
        ("command", "command"),
        ("admin", "admin page"),
        ("action", "admin action"),
        ("automatic", "automatic"),
    ]

    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    project = models.ForeignKey(
        Project,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Empty: every project.",
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    trigger = models.CharField(max_length=16, choices=TRIGGERS)
    user = models.CharField(max_length=150, blank=True, help_text="Who ran it (user name or OS user).")
    dry_run = models.BooleanField(default=False)
    criteria = models.JSONField(default=dict)
    counts = models.JSONField(default=dict)
    batches = models.PositiveIntegerField(default=0)
    longest_transaction_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"{self.get_trigger_display()} prune at {self.started_at:%Y-%m-%d %H:%M}"


class IngestReceipt(models.Model):
    """One per ingestion request or import: counts, every rejection with its reason and
    path, and every field the server redacted or cut, with the rule (never the value)."""

    SOURCES = [
        ("api", "API"),
        ("import_history", "import_history"),
        ("import_agno", "import_agno"),
        ("quickstart", "quickstart"),
        ("otlp", "OpenTelemetry"),
    ]

    OPEN, COMPLETE, INTERRUPTED = "open", "complete", "interrupted"
    STATES = [(OPEN, "in progress"), (COMPLETE, "complete"), (INTERRUPTED, "interrupted")]
    # A request writes its receipt after every item, and no item takes this long: an open
    # receipt left idle longer belongs to a request that was killed (a worker SIGKILLed or
    # timed out) and is shown as interrupted.
    IDLE_LIMIT = timedelta(minutes=2)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    source = models.CharField(max_length=32, choices=SOURCES)
    token = models.ForeignKey(IngestToken, null=True, blank=True, on_delete=models.SET_NULL)
    label = models.CharField(max_length=255, blank=True, help_text="The file or folder imported.")
    state = models.CharField(max_length=16, choices=STATES, default=COMPLETE)
    updated_at = models.DateTimeField(default=timezone.now)
    item_count = models.PositiveIntegerField(default=0, help_text="Items in the request.")
    counts = models.JSONField(default=dict)
    rejections = models.JSONField(default=list)
    changed_fields = models.JSONField(default=list)
    # The runs it stored ({"run_id", "status"}: created, updated or duplicate), the first
    # ``RUNS_KEPT`` of them: the receipts page links to each.
    stored_runs = models.JSONField(default=list, blank=True)
    RUNS_KEPT = 200

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at", "-id"], name="receipt_project_created_idx")]

    def __str__(self) -> str:
        return f"{self.get_source_display()} at {self.created_at:%Y-%m-%d %H:%M:%S}"

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def stored(self) -> int:
        """Items kept so far (created, updated or already there)."""
        return sum(self.counts.get(key, 0) for key in ("created", "updated", "duplicate"))

    @property
    def shown_state(self) -> str:
        """The stored state, except that an open receipt gone idle is "interrupted"."""
        if self.state == self.OPEN and timezone.now() - self.updated_at > self.IDLE_LIMIT:
            return self.INTERRUPTED
        return self.state


class SpanBatch(models.Model):
    """Spans of one trace received at ``/v1/traces`` in one request, redacted, kept so that
    the spans of a trace that arrive in several requests, in any order, assemble into its
    runs again each time more arrive (``traces``). ``data`` is a JSON list of spans as
    ``agent_history.otlp`` reads them, compressed with zlib: one row per trace and request
    (not per span) keeps the writes few. A span sent again is kept again only when its
    content changed; when a trace is read, the latest copy of each span wins. ``session``
    is the trace's session once its runs are stored: retention and deletion take its
    spans with it."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    trace_id = models.CharField(max_length=32)
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    span_count = models.PositiveIntegerField(default=0)
    data = models.BinaryField()

    class Meta:
        indexes = [models.Index(fields=["project", "trace_id"], name="spanbatch_project_trace_idx")]

    def __str__(self) -> str:
        return f"{self.span_count} spans of trace {self.trace_id}"


class SessionFacet(models.Model):
    """What some run of the session has: a tool it called, a status, an agent (its agent
    name, team or workflow id), tool errors or a failure ("errors"). The sessions list's
    filters read these indexed lists instead of walking every session's runs and tool
    calls. Kept by ingestion and pruning (``rollups.py``)."""

    TOOL, STATUS, AGENT, ERRORS, ANNOTATION = "tool", "status", "agent", "errors", "annotation"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="+")
    facet = models.CharField(max_length=16)
    value = models.CharField(max_length=255)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "facet", "value"], name="sessionfacet_uniq")
        ]
        indexes = [models.Index(fields=["facet", "value", "session"], name="sessionfacet_value_idx")]

    def __str__(self) -> str:
        return f"{self.facet}={self.value} in session {self.session_id}"


class SessionScore(models.Model):
    """A session's numeric scores of one name (issue #18): how many, their sum and mean,
    recounted from its runs' annotations whenever they change (``rollups``). The sessions
    list sorted by a score walks the (name, mean) index instead of averaging every
    session's scores."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="scores")
    name = models.CharField(max_length=64)
    count = models.IntegerField(default=0)
    total = models.FloatField(default=0)
    mean = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "name"], name="sessionscore_uniq")]
        indexes = [models.Index(fields=["name", "mean", "session"], name="sessionscore_mean_idx")]

    def __str__(self) -> str:
        return f"{self.name} {self.mean:g} × {self.count} in session {self.session_id}"


class DailyStat(models.Model):
    """The stats page's counts, per day (in ``TIME_ZONE``, of when a run started, else was
    received): with ``tool`` empty, the day's runs and failed runs; with a tool, its calls
    and the calls that failed. Kept by ingestion and pruning (``rollups.py``)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    tool = models.CharField(max_length=255, blank=True)
    runs = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    calls = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "day", "tool"], name="dailystat_day_tool_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.tool or 'runs'}"


class DailyUsage(models.Model):
    """Model calls per day (of their run, as ``DailyStat``), model and agent: calls,
    tokens and cost, and the calls with tokens but no price (issue #14)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    model = models.CharField(max_length=255, blank=True)
    agent = models.CharField(max_length=255, blank=True)
    calls = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.FloatField(default=0)
    unpriced = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "day", "model", "agent"], name="dailyusage_day_model_agent_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.model or 'unknown model'} {self.agent}"


class DailyLatency(models.Model):
    """How many runs (``kind`` "run") and model calls ("model") took how long, per day, in
    buckets a ninth wider each (``rollups.latency_bucket``): the stats page's percentiles
    over time read a few hundred rows, whatever the number of runs."""

    RUN, MODEL = "run", "model"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    kind = models.CharField(max_length=8)
    bucket = models.IntegerField()
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "day", "kind", "bucket"], name="dailylatency_day_kind_bucket_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.kind} bucket {self.bucket}"


class DailyScore(models.Model):
    """Scores per day (of their run, as ``DailyStat``), agent, name and category (issue
    #18): how many, and the sum of the numeric ones (``category`` empty); a categorical
    score counts under its value. Kept as annotations are written and deleted, so that the
    stats page reads at most a row per day, agent and score, whatever their number."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    agent = models.CharField(max_length=255, blank=True)
    name = models.CharField(max_length=64)
    category = models.CharField(max_length=64, blank=True)
    count = models.BigIntegerField(default=0)
    total = models.FloatField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "day", "agent", "name", "category"], name="dailyscore_day_agent_name_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.name} {self.category or 'numeric'} {self.agent}"
