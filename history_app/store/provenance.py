"""Provenance: which stored run each entry of a history block came from.

A history block an agent reports without its sources (an injected context of kind
``team_history``, ``workflow_history`` or ``member_interactions`` whose ``source_run_ids``
is empty) is split into its entries by the renderers' layout (``agent_history.blocks``),
and each entry that the layout settles gets a fingerprint: the SHA-256 of the text a
source run leaves in it, exactly as ``agent_history.context.entry_body`` writes it (for
member interactions, the ``Member:`` and ``Response:`` lines, scoped to the team run).
Every stored run gets the fingerprints of what it would leave in each kind of block, in
each layout, in our neutralised form and in agno's verbatim one (``RunFingerprint``).

Linking is then an indexed lookup within the session, whichever arrives first:

- a new context: its entries (``ContextEntry``) look up the session's run fingerprints
  (one query);
- a new run: its fingerprints look up the session's entries (one query); entries it
  settles are linked, and their contexts' ``source_run_ids`` rewritten in block order.

An entry is linked when exactly one run of the session (other than the run the block was
sent in) has its fingerprint: two runs with the same content, or two entries of one block
with the same text (one forging the other), are left unlinked rather than guessed. Both
happen in the session's lock and transaction, so the result does not depend on the order
in which runs arrive. ``InjectedContext.source_run_ids`` stays the public result: the
linked entries' runs, in block order.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from history_app import models
from history_app.agent_history import blocks

LINKABLE_KINDS = blocks.LINKABLE_KINDS
_SOURCE_KINDS = {"team": "team_history", "workflow": "workflow_history"}


def run_fingerprints(run: Any) -> set[str]:
    """Every fingerprint ``run`` (a stored row or a record) can leave in a history block:
    a team run in team history, a workflow run in workflow history (both layouts), a run
    with a parent in its team run's member interactions; each in both forms."""
    found = set()
    kind = _SOURCE_KINDS.get(run.kind)
    if kind is not None:
        found |= {blocks.fingerprint(kind, key) for key in blocks.source_keys(kind, run)}
    if run.parent_run_id:
        interaction = {"member": run.agent_name or None, "task": "", "response": run.output}
        found |= {
            blocks.fingerprint("member_interactions", key, run.parent_run_id)
            for key in blocks.source_keys("member_interactions", interaction)
        }
    return found


def entry_fingerprints(text: str, kind: str, parent_run_id: str | None) -> list[tuple[int, str]]:
    """(position, fingerprint) of each entry of a block that can be linked: the layout
    settles it, and no other entry of the block has the same text. Member interactions
    are those of one team run, so they need the run's parent."""
    if kind not in LINKABLE_KINDS:
        return []
    scope = ""
    if kind == "member_interactions":
        if not parent_run_id:
            return []
        scope = parent_run_id
    keyed = [
        (entry.position, entry.key) for entry in blocks.split_entries(text, kind) if entry.key is not None
    ]
    seen = Counter(key for _, key in keyed)
    return [(position, blocks.fingerprint(kind, key, scope)) for position, key in keyed if seen[key] == 1]


def is_linked_here(context: Any) -> bool:
    """Whether the server finds the sources of ``context``: a history block reported
    without them (sources the agent reported are kept as they are)."""
    return context.kind in LINKABLE_KINDS and not context.source_run_ids


@dataclass
class Previous:
    """A run's fingerprints before it is rewritten, and where they were."""

    session_id: int | None = None
    fingerprints: set[str] = field(default_factory=set)
    # Positions of its contexts whose sources the server had found (for a rewrite that
    # keeps the contexts, such as redact_history).
    linked_positions: set[int] = field(default_factory=set)


def before_rewrite(row: models.Run, *, positions: bool = False) -> Previous:
    """Read what a run's provenance rows say before ``delete_children`` removes them."""
    previous = Previous(session_id=row.session_id)
    previous.fingerprints = set(
        models.RunFingerprint.objects.filter(run=row).values_list("fingerprint", flat=True)
    )
    if positions:
        previous.linked_positions = set(
            models.ContextEntry.objects.filter(run=row).values_list("context__position", flat=True)
        )
    return previous


def link_run(
    row: models.Run,
    contexts: Iterable[models.InjectedContext] | None = None,
    *,
    previous: Previous | None = None,
) -> None:
    """Provenance for a run just written (inside its transaction, its session locked):
    store its fingerprints and the entries of its contexts that the server links, link
    those entries to the session's runs, and link the session's entries that were waiting
    for this run (late sources). Queries: a constant number, whatever the session's size.

    ``contexts`` are the run's stored contexts (with primary keys), read when not given."""
    own = run_fingerprints(row)
    models.RunFingerprint.objects.bulk_create(
        models.RunFingerprint(run=row, session_id=row.session_id, fingerprint=fp) for fp in sorted(own)
    )
    if contexts is None:
        contexts = models.InjectedContext.objects.filter(run=row, kind__in=LINKABLE_KINDS)
    entries = []
    linked_contexts = []
    for context in contexts:
        if not is_linked_here(context) or context.pk is None:
            continue
        linked_contexts.append(context)
        entries += [
            models.ContextEntry(
                context=context,
                run=row,
                session_id=row.session_id,
                position=position,
                fingerprint=fp,
            )
            for position, fp in entry_fingerprints(context.text, context.kind, row.parent_run_id)
        ]
    # The run's own entries: one lookup of the session's runs.
    if entries:
        owners = _owners(row.session_id, {entry.fingerprint for entry in entries})
        for entry in entries:
            entry.source_run_id = _source(owners, entry.fingerprint, row.pk)
        models.ContextEntry.objects.bulk_create(entries)
        by_context: dict[int, list[str]] = defaultdict(list)
        for entry in entries:
            if entry.source_run_id:
                by_context[entry.context_id].append(entry.source_run_id)
        changed = []
        for context in linked_contexts:
            sources = _distinct(by_context.get(context.pk, []))
            if sources != list(context.source_run_ids):
                context.source_run_ids = sources
                changed.append(context)
        if changed:
            models.InjectedContext.objects.bulk_update(changed, ["source_run_ids"])
    # Entries elsewhere in the session that this run settles (or, rewritten, unsettles).
    if previous is not None and previous.session_id not in (None, row.session_id):
        relink(previous.session_id, previous.fingerprints)
        relink(row.session_id, own)
    else:
        relink(row.session_id, own | (previous.fingerprints if previous else set()))


def relink(session_id: int, fingerprints: set[str]) -> int:
    """Link again the session's entries that have one of ``fingerprints`` (a run with them
    arrived, changed or left). Returns how many entries changed."""
    if not fingerprints:
        return 0
    entries = list(
        models.ContextEntry.objects.filter(session_id=session_id, fingerprint__in=fingerprints).only(
            "id", "context_id", "run_id", "fingerprint", "source_run_id"
        )
    )
    if not entries:
        return 0
    owners = _owners(session_id, {entry.fingerprint for entry in entries})
    changed = []
    for entry in entries:
        source = _source(owners, entry.fingerprint, entry.run_id)
        if source != entry.source_run_id:
            entry.source_run_id = source
            changed.append(entry)
    if changed:
        models.ContextEntry.objects.bulk_update(changed, ["source_run_id"])
        write_sources({entry.context_id for entry in changed})
    return len(changed)


def write_sources(context_ids: set[int]) -> None:
    """Rewrite the contexts' ``source_run_ids`` from their entries, in block order."""
    rows = (
        models.ContextEntry.objects.filter(context_id__in=context_ids)
        .order_by("context_id", "position")
        .values_list("context_id", "source_run_id")
    )
    sources: dict[int, list[str]] = {pk: [] for pk in context_ids}
    for context_id, source in rows:
        if source:
            sources[context_id].append(source)
    models.InjectedContext.objects.bulk_update(
        [models.InjectedContext(pk=pk, source_run_ids=_distinct(ids)) for pk, ids in sources.items()],
        ["source_run_ids"],
    )


def _owners(session_id: int, fingerprints: set[str]) -> dict[str, set[tuple[int, str]]]:
    """fingerprint -> the (primary key, run id) of each run of the session that has it."""
    owners: dict[str, set[tuple[int, str]]] = defaultdict(set)
    rows = models.RunFingerprint.objects.filter(session_id=session_id, fingerprint__in=fingerprints)
    for fp, pk, run_id in rows.values_list("fingerprint", "run_id", "run__run_id"):
        owners[fp].add((pk, run_id))
    return owners


def _source(owners: dict[str, set[tuple[int, str]]], fp: str, quoting_pk: int | None) -> str | None:
    """The one run (not the run the block was sent in) with ``fp``, or None."""
    candidates = {run_id for pk, run_id in owners.get(fp, ()) if pk != quoting_pk}
    return next(iter(candidates)) if len(candidates) == 1 else None


def _distinct(sources: list[str]) -> list[str]:
    """A run is the source of one entry of a block: one named by two entries (one of them
    a copy in the content) is linked to neither."""
    seen = Counter(sources)
    return [source for source in sources if seen[source] == 1]


# -- for databases filled before fingerprints (manage.py relink_contexts) ---------------------


def relink_session(session: models.Session, *, everything: bool = False) -> dict[str, int]:
    """Rebuild the fingerprints and entries of one session from its stored runs and
    contexts and link them. Contexts whose sources the server found (or never found) are
    linked again; with ``everything``, also those whose sources were reported, or found by
    the marker matching of earlier versions. Call it in a transaction with the session locked."""
    runs = list(
        models.Run.objects.filter(session=session).only(
            "id", "run_id", "kind", "parent_run_id", "agent_name", "input", "output", "session_id"
        )
    )
    by_pk = {run.pk: run for run in runs}
    models.RunFingerprint.objects.filter(session=session)._raw_delete(models.RunFingerprint.objects.db)
    fingerprints = [
        models.RunFingerprint(run=run, session=session, fingerprint=fp)
        for run in runs
        for fp in sorted(run_fingerprints(run))
    ]
    models.RunFingerprint.objects.bulk_create(fingerprints, batch_size=1000)
    owners: dict[str, set[tuple[int, str]]] = defaultdict(set)
    for fp in fingerprints:
        owners[fp.fingerprint].add((fp.run_id, by_pk[fp.run_id].run_id))
    had_entries = set(
        models.ContextEntry.objects.filter(session=session).values_list("context_id", flat=True)
    )
    models.ContextEntry.objects.filter(session=session)._raw_delete(models.ContextEntry.objects.db)
    contexts = models.InjectedContext.objects.filter(run__session=session, kind__in=LINKABLE_KINDS).only(
        "id", "run_id", "kind", "text", "source_run_ids"
    )
    entries, changed, linked = [], [], 0
    for context in contexts.iterator(chunk_size=500):
        if not (everything or not context.source_run_ids or context.pk in had_entries):
            continue
        own = [
            models.ContextEntry(
                context_id=context.pk,
                run_id=context.run_id,
                session=session,
                position=position,
                fingerprint=fp,
                source_run_id=_source(owners, fp, context.run_id),
            )
            for position, fp in entry_fingerprints(
                context.text, context.kind, by_pk[context.run_id].parent_run_id
            )
        ]
        entries += own
        sources = _distinct([entry.source_run_id for entry in own if entry.source_run_id])
        linked += len(sources)
        if sources != list(context.source_run_ids):
            context.source_run_ids = sources
            changed.append(context)
    models.ContextEntry.objects.bulk_create(entries, batch_size=1000)
    models.InjectedContext.objects.bulk_update(changed, ["source_run_ids"], batch_size=500)
    return {
        "runs": len(runs),
        "fingerprints": len(fingerprints),
        "entries": len(entries),
        "linked": linked,
        "contexts_changed": len(changed),
    }


__all__ = [
    "LINKABLE_KINDS",
    "Previous",
    "before_rewrite",
    "entry_fingerprints",
    "is_linked_here",
    "link_run",
    "relink",
    "relink_session",
    "run_fingerprints",
    "write_sources",
]
