"""The context inspector: what one step of a run was told, where each entry came from,
how it compares with what our renderers rebuild, and how it changed since the step before.

Texts are handed to the templates in pieces (linked entry headers, diff lines with their
classes); the templates escape every piece, so nothing here writes markup. Re-rendering uses the library's own
renderers (``agent_history.context``), the same code the agents call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from history_app import models
from history_app.agent_history import blocks
from history_app.agent_history import context as renderers
from history_app.reading.diffs import Budget, LineDiff, line_diff
from history_app.reading.forms import InspectorForm
from history_app.reading.paging import NotFound
from history_app.store import provenance

MAX_HISTORY_RUNS = 100
MAX_DETAIL_ITEMS = 100
# At most 9 ASCII digits: a longer number is no entry of ours (and int() of thousands of
# digits raises), so it stays plain text.
_RUN_MARK = re.compile(r"\[(run-|Workflow Run-)([0-9]{1,9})\]")
_MEMBER_MARK = re.compile(r"^Member: .*$", re.MULTILINE)

RERENDERABLE = ("workflow_history", "team_history", "member_interactions", "cot_history")
# Blocks agno writes into a system message from state it keeps only in its latest form:
# named, never rebuilt (the API's ``rebuild`` is null for them).
AGNO_STATE_BLOCKS = {
    "session_summary": (
        "Session summary: the <summary_of_previous_interactions> block agno put in the system "
        "message, exactly as sent. It cannot be rebuilt: agno keeps only the session's latest "
        "summary (each summary replaces the one before), not the one this run was given."
    ),
    "memories": (
        "Memories: the <memories_from_previous_interactions> block agno put in the system message, "
        "exactly as sent. It cannot be rebuilt: agno keeps the user's memories as they are now "
        "(updated and deleted in place), not as this run read them."
    ),
}
# What the rebuild check concludes (``Inspection.verdict``, the JSON's ``rebuild.verdict``).
IDENTICAL, DIFFERS, CANNOT_REBUILD = "identical", "differs", "cannot_rebuild"


@dataclass
class Settings:
    """The re-render control: how many history runs, CoT detail items, timestamps."""

    history_runs: int
    detail_items: int
    timestamps: bool

    @classmethod
    def from_query(cls, params: Any, defaults: Settings) -> Settings:
        data = InspectorForm.read(params, max_runs=MAX_HISTORY_RUNS, max_items=MAX_DETAIL_ITEMS)
        return cls(
            history_runs=defaults.history_runs if data["runs"] is None else data["runs"],
            detail_items=defaults.detail_items if data["items"] is None else data["items"],
            # An unticked box sends nothing: "timestamps" counts only when the form was sent.
            timestamps=data["timestamps"] if "runs" in params or "items" in params else defaults.timestamps,
        )


@dataclass
class Inspection:
    run: models.Run
    context: models.InjectedContext
    linked_text: list[Segment]
    sources: list[tuple[str, models.Run | None]]
    defaults: Settings
    settings: Settings
    rebuilt: str | None = None  # from the linked source runs, under the context's own settings
    rebuilt_diff: LineDiff | None = None
    # identical, differs or cannot_rebuild (no source run or entry to render from); None
    # for free text, which is never re-rendered.
    verdict: str | None = None
    rerendered: str | None = None  # under the settings asked for
    rerendered_diff: LineDiff | None = None
    previous: models.InjectedContext | None = None
    previous_diff: LineDiff | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def rerenderable(self) -> bool:
        return self.context.kind in RERENDERABLE


def inspect(project: models.Project, run_id: str, position: int, params: Any) -> Inspection:
    """Everything the inspector page shows, in at most six queries whatever the sizes.
    Its sources are runs of the same project only: a source id that names a run of
    another project is shown as not stored, never linked."""
    try:
        context = models.InjectedContext.objects.select_related("run__session").get(
            run__project=project, run__run_id=run_id, position=position
        )
    except models.InjectedContext.DoesNotExist:
        raise NotFound(f"run {run_id!r} has no injected context {position + 1}") from None
    run = context.run
    source_ids = [str(s) for s in context.source_run_ids if s]
    in_project = models.Run.objects.filter(project=project, run_id__in=source_ids)
    stored = {r.run_id: r for r in in_project.only(*_RUN_FIELDS)}
    for source in stored.values():
        source.project = project  # found in it: their links need no query
    sources = [(run_id, stored.get(run_id)) for run_id in source_ids]
    defaults = _defaults(context)
    settings = Settings.from_query(params, defaults)
    inspection = Inspection(
        run=run,
        context=context,
        linked_text=link_sources(context.text, context.kind, source_ids, stored, parent=run.parent_run_id),
        sources=sources,
        defaults=defaults,
        settings=settings,
    )
    # The page's three diffs share one budget: each is bounded, and so are they together.
    budget = Budget()
    if context.kind in RERENDERABLE:
        pool = _pool(run, context)
        if source_ids and context.kind != "cot_history":
            drawn = [stored[s] for s in source_ids if s in stored]
        else:
            drawn = pool
        tasks = handed_tasks([*drawn, *pool]) if context.kind == "member_interactions" else {}
        if not drawn:
            # Nothing to render from: an empty rebuild would only "differ" by the whole block.
            inspection.verdict = CANNOT_REBUILD
        else:
            rebuilt = _render(context, drawn, defaults, layout_of=context.text, tasks=tasks)
            if rebuilt != context.text and context.kind in _BLOCKS:
                # agno escapes nothing: content holding a closing tag (a task quoting another
                # block) is sent verbatim, which our default renderers neutralise.
                verbatim = _render(
                    context, drawn, defaults, layout_of=context.text, verbatim=True, tasks=tasks
                )
                if verbatim == context.text:
                    rebuilt = verbatim
            inspection.rebuilt = rebuilt
            inspection.verdict = IDENTICAL if rebuilt == context.text else DIFFERS
            if rebuilt != context.text:
                inspection.rebuilt_diff = diff_lines(context.text, rebuilt, "sent", "rebuilt", budget)
        inspection.rerendered = _render(context, pool, settings, layout_of=context.text, tasks=tasks)
        if inspection.rerendered is not None:
            inspection.rerendered_diff = diff_lines(
                context.text, inspection.rerendered, "sent", "re-rendered", budget
            )
    elif context.kind == "chat_history":
        inspection.notes.append(
            "Chat history: the messages replayed from earlier runs, which the model received as messages "
            "of their own (each model call lists them), shown here one line each; only history blocks "
            "(workflow, team, member interactions, CoT) are re-rendered."
        )
    elif context.kind in AGNO_STATE_BLOCKS:
        inspection.notes.append(AGNO_STATE_BLOCKS[context.kind])
    else:
        inspection.notes.append(
            f"{context.get_kind_display()} is free text the agent wrote; only history blocks "
            "(workflow, team, member interactions, CoT) can be re-rendered."
        )
    inspection.previous = _previous(run, context)
    if inspection.previous is not None:
        inspection.previous_diff = diff_lines(
            inspection.previous.text, context.text, "previous step", "this step", budget
        )
    return inspection


_RUN_FIELDS = (
    "project_id",
    "run_id",
    "input",
    "output",
    "agent_name",
    "kind",
    "status",
    "started_at",
    "parent_run_id",
)


def _defaults(context: models.InjectedContext) -> Settings:
    settings = context.settings or {}
    runs = settings.get("num_history_runs")
    if not isinstance(runs, int):
        runs = len(context.source_run_ids) or 3
    items = settings.get("history_detail_items")
    if not isinstance(items, int):
        items = renderers.DEFAULT_DETAIL_ITEMS
    stamps = bool(settings.get("include_timestamps") or settings.get("include_timestamp"))
    return Settings(
        history_runs=max(0, min(runs, MAX_HISTORY_RUNS)),
        detail_items=max(0, min(items, MAX_DETAIL_ITEMS)),
        timestamps=stamps,
    )


def _pool(run: models.Run, context: models.InjectedContext) -> list[Any]:
    """What a renderer could draw from at this step (one query): earlier runs of the kind
    in the session, the sibling members of a team run, or the CoT entries of the run."""
    if context.kind == "cot_history":
        iterations = models.Iteration.objects.filter(run=run).only("metadata").order_by("position")
        return [it.metadata.get("entry") for it in iterations if isinstance(it.metadata.get("entry"), dict)]
    runs = models.Run.objects.filter(session_id=run.session_id).exclude(pk=run.pk).only(*_RUN_FIELDS)
    if context.kind == "member_interactions":
        if not run.parent_run_id:
            return []
        runs = runs.filter(parent_run_id=run.parent_run_id).exclude(output__isnull=True)
    elif context.kind == "team_history" and run.parent_run_id:
        # agno's get_team_history_context: a sub-team is sent its own earlier runs, at any
        # depth; an agent member, the session's top-level team runs. Never the runs it
        # ran under (they were in progress), only completed ones.
        runs = runs.filter(kind="team", status="completed").exclude(output__isnull=True)
        runs = runs.exclude(run_id__in=_ancestors(run))
        if run.kind == "team":
            runs = runs.filter(team_id=run.team_id) if run.team_id else runs.filter(agent_name=run.agent_name)
        else:
            runs = runs.filter(Q(parent_run_id__isnull=True) | Q(parent_run_id=""))
    else:
        kind = "workflow" if context.kind == "workflow_history" else "team"
        runs = runs.filter(kind=kind).exclude(output__isnull=True)
    if run.started_at:
        runs = runs.filter(Q(started_at__lt=run.started_at) | Q(started_at__isnull=True))
    return list(runs.order_by("started_at", "received_at", "id")[:1000])


def _ancestors(run: models.Run, depth: int = 20) -> list[str]:
    """The run ids of the runs ``run`` ran under, up to ``depth`` levels (a query each)."""
    found: list[str] = []
    parent = run.parent_run_id
    while parent and parent not in found and len(found) < depth:
        found.append(parent)
        parent = (
            models.Run.objects.filter(session_id=run.session_id, run_id=parent)
            .values_list("parent_run_id", flat=True)
            .first()
        )
    return found


_BLOCKS = {
    "workflow_history": (renderers.WORKFLOW_HEADER, renderers.WORKFLOW_FOOTER),
    "team_history": (renderers.TEAM_HEADER, renderers.TEAM_FOOTER),
    "member_interactions": (renderers.INTERACTIONS_HEADER, renderers.INTERACTIONS_FOOTER),
}


def splice(sent: str, block: str, kind: str) -> str:
    """``sent`` with its history block replaced by ``block``: a context often wraps the block
    in other text (instructions, the task), which a re-render leaves as it was.

    The block's end is where the rebuilt block's closing tag falls, else where the block
    finder's layout reading ends it; never simply the last closing tag, which may belong to
    a block that content quotes (a task asking about another prompt)."""
    if kind not in _BLOCKS:
        return block
    header, footer = _BLOCKS[kind]
    start = sent.find(header)
    if start == -1:
        return block
    end = _block_end(sent, start, block, kind, footer)
    if end is None:
        return block
    if block.endswith(footer + "\n") and sent[end : end + 1] == "\n":
        end += 1
    return sent[:start] + block + sent[end:]


def _block_end(sent: str, start: int, block: str, kind: str, footer: str) -> int | None:
    """Where the closing tag of the ``kind`` block opened at ``start`` ends (one past it)."""
    # The rebuilt block lands on a closing tag of the sent text: that is the block's end.
    for end in (start + len(block), start + len(block) - 1):
        if sent.startswith(footer, end - len(footer)) and sent.startswith(block[: end - start], start):
            return end
    rest = sent[start:]
    if kind == "workflow_history":
        located = [blocks.locate_workflow_block(rest)]
    else:
        located = blocks.locate_member_blocks(rest)
    for found in located:
        if found is not None and found.kind == kind and found.start == 0:
            return start + found.end - (1 if found.text.endswith("\n") else 0)
    last = sent.rfind(footer)
    return last + len(footer) if last >= start else None


def handed_tasks(runs: list[Any]) -> dict[int, str]:
    """The task each member run was handed, by run pk, where its message began with history
    blocks: its input less the blocks (its own stored contexts at the head of the message,
    each followed by ``blocks.JOIN``, as agno's ``format_member_agent_task`` joins them).
    Another member's interactions quote the task alone, never the blocks before it. One
    query; a run whose input does not begin with its blocks keeps its input."""
    if not runs:
        return {}
    heads: dict[int, list[str]] = {}
    rows = (
        models.InjectedContext.objects.filter(
            run__in=[r.pk for r in runs], kind__in=("member_interactions", "team_history"), target="user"
        )
        .order_by("run_id", "position")
        .values_list("run_id", "text")
    )
    for run_pk, text in rows:
        heads.setdefault(run_pk, []).append(text)
    tasks = {}
    for run in runs:
        task = run.input or ""
        for head in heads.get(run.pk, []):
            if task.startswith(head + blocks.JOIN):
                task = task[len(head) + len(blocks.JOIN) :]
        if task != run.input:
            tasks[run.pk] = task
    return tasks


def _render(
    context: models.InjectedContext,
    pool: list[Any],
    settings: Settings,
    *,
    layout_of: str,
    verbatim: bool = False,
    tasks: dict[int, str] | None = None,
) -> str:
    block = _render_block(context, pool, settings, layout_of=layout_of, verbatim=verbatim, tasks=tasks or {})
    return splice(context.text, block, context.kind)


def _render_block(
    context: models.InjectedContext,
    pool: list[Any],
    settings: Settings,
    *,
    layout_of: str,
    verbatim: bool = False,
    tasks: dict[int, str],
) -> str:
    if context.kind == "cot_history":
        max_chars = (context.settings or {}).get(
            "history_result_max_chars", renderers.DEFAULT_RESULT_MAX_CHARS
        )
        return renderers.render_cot_history(
            pool, detail_items=settings.detail_items, result_max_chars=max_chars
        )
    entries = pool[-settings.history_runs :] if settings.history_runs else []
    if context.kind == "member_interactions":
        return renderers.render_member_interactions(
            [
                {"member": r.agent_name, "task": tasks.get(r.pk, r.input), "response": r.output}
                for r in entries
            ],
            verbatim=verbatim,
        )
    if context.kind == "team_history":
        return renderers.render_team_history(entries, verbatim=verbatim)
    if "[Workflow Run-" in layout_of:
        return renderers.render_workflow_history(
            entries,
            run_label="Workflow Run-{n}",
            input_label="User input",
            output_label="Workflow output",
            include_timestamp=settings.timestamps,
            verbatim=verbatim,
        )
    return renderers.render_workflow_history(
        entries, include_timestamp=settings.timestamps, verbatim=verbatim
    )


def _previous(run: models.Run, context: models.InjectedContext) -> models.InjectedContext | None:
    """The same kind of context one step earlier: earlier in this run, else in the
    session's latest earlier run that has one (one query)."""
    same = models.InjectedContext.objects.filter(
        run__session_id=run.session_id, kind=context.kind, target=context.target
    ).select_related("run")
    earlier = Q(run=run, position__lt=context.position)
    if run.started_at:
        earlier |= Q(run__started_at__lt=run.started_at)
    return same.filter(earlier).order_by("-run__started_at", "-position").first()


@dataclass(frozen=True)
class Segment:
    """A piece of a context's text; ``url`` when it is an entry header linked to its source."""

    text: str
    url: str | None = None
    source: str | None = None


def _nth(items: list[str], index: int) -> str | None:
    return items[index] if 0 <= index < len(items) else None


def _pair_by_fingerprint(
    text: str, entries: list[blocks.Entry], kind: str, sources: list[Any], parent: str | None
) -> list[str | None]:
    """Each entry's source among ``sources``: the one run whose fingerprints hold the
    entry's (the same functions as ingestion's ``provenance``)."""
    owners: dict[str, set[str]] = {}
    for source in sources:
        for fp in provenance.run_fingerprints(source):
            owners.setdefault(fp, set()).add(source.run_id)
    fingerprints = dict(provenance.entry_fingerprints(text, kind, parent))
    paired: list[str | None] = []
    for entry in entries:
        found = owners.get(fingerprints.get(entry.position, ""), set())
        paired.append(next(iter(found)) if len(found) == 1 else None)
    return paired


def link_sources(
    text: str, kind: str, source_ids: list[str], stored: dict[str, Any], *, parent: str | None = None
) -> list[Segment]:
    """The exact text in pieces, each entry's header (``[run-N]``, ``[Workflow Run-N]``, a
    member entry's ``Member:`` line) that has a stored source run as a linked piece; the
    template escapes every piece.

    Entries are found by the renderers' layout (``blocks.split_entries``), so a header
    inside content is never linked. When there is one source per entry, they pair up in
    order (what the agent reported, or every entry linked); otherwise each entry is paired
    with the stored source that has its fingerprint, and the rest stay plain text."""
    entries = blocks.split_entries(text, kind) if source_ids else []
    if entries:
        if len(entries) == len(source_ids):
            paired: list[str | None] = list(source_ids)
        else:
            paired = _pair_by_fingerprint(
                text, entries, kind, [stored[s] for s in source_ids if s in stored], parent
            )
        headers = []
        for entry, source in zip(entries, paired, strict=True):
            end = entry.header_end - 1 if kind == "member_interactions" else text.index("]", entry.start) + 1
            headers.append((entry.start, end, source))
    else:
        pattern = _MEMBER_MARK if kind == "member_interactions" else _RUN_MARK
        headers = [
            (
                m.start(),
                m.end(),
                _nth(source_ids, n if kind == "member_interactions" else int(m.group(2)) - 1),
            )
            for n, m in enumerate(pattern.finditer(text))
        ]
    segments, last = [], 0
    for start, end, source in headers:
        if source is None or source not in stored:
            continue
        url = stored[source].get_absolute_url()
        segments += [Segment(text[last:start]), Segment(text[start:end], url, source)]
        last = end
    segments.append(Segment(text[last:]))
    return segments


def diff_lines(
    before: str, after: str, before_name: str, after_name: str, budget: Budget | None = None
) -> LineDiff:
    """A unified diff, each line with its class (header, hunk, add, del, context), or why
    there is none (``diffs.line_diff``: bounded in lines, characters and steps)."""
    return line_diff(before, after, before_name, after_name, budget)
