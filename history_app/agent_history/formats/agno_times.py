"""Times for the runs of one agno import, ordered so that nothing sits outside its parent.

agno stores a run's start (``created_at``) and each message's time in whole seconds, a
run's and a model call's duration from its timers, and a tool execution's start and end
to the microsecond (``tools[].metrics``). Read as they are, a model call ends at the whole
second its answer was stored, so it seems to start before its run; a tool call seems to
run after its run ended; and a delegation's timer measures only what the team did with
the member's answer, after the member run it started had ended.

``place_times`` lays each tree of runs (a top-level run, its model calls, tool calls,
member runs and workflow steps) end to end in the order agno ran them, each part lasting
what agno measured, and anchors the tree on the tool times agno kept exactly:

* the top-level run starts where the exact tool times put it (the earliest start they
  allow), never before its whole-second ``created_at`` nor a second after it; with no
  exact tool time, at ``created_at``; and not before the session's run before it (in the
  order given, agno's) ended, as long as that is within its second;
* a tool call with exact times keeps them whenever the parts before it fit before it; a
  model call that asked for such a tool ends when the tool starts;
* a delegation spans the member run it started (and the team's own handling after it);
  a workflow step (an iteration of the workflow run) spans its step run; the steps inside
  composite steps (Parallel, Condition, Loop, Router) are steps of their own, in the order
  agno ran them, the branches of one Parallel step side by side from the same start;
* a run lasts at least its measured duration and at least until its last part ends;
  nothing starts before the whole second agno stored for it.

Every time set this way is marked: ``metadata["time_estimated"]`` on a run, a model call
and an iteration, and the run's ``metadata["estimated_tool_times"]`` lists the call ids
(or tool names) of its tool calls whose times were placed rather than kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from ..records import Iteration, ModelCall, Run, ToolCall, check_time_range, is_delegation

# The latest a run can have started after its whole-second created_at.
_WITHIN_SECOND = timedelta(seconds=1) - timedelta(microseconds=1)


def _seconds(start: datetime | None, end: datetime | None) -> float:
    if start is None or end is None:
        return 0.0
    return max((end - start).total_seconds(), 0.0)


def delegations(run: Run) -> list[ToolCall]:
    """The run's delegations to one member each, in order. A delegation to one member
    names it; ``delegate_task_to_members`` hands the task to every member, whose own runs
    say what each did."""
    return [
        call
        for iteration in run.iterations
        for call in iteration.tool_calls
        if is_delegation(call.tool, call.params)
        and isinstance(call.params, dict)
        and "member_id" in call.params
    ]


class _Tree:
    """The runs of one import by id, with the member run each delegation started and the
    run each workflow step ran."""

    def __init__(self, runs: list[Run]):
        self.by_id = {run.run_id: run for run in runs}
        self.durations = {run.run_id: _seconds(run.started_at, run.ended_at) for run in runs}
        self.floors = {run.run_id: run.started_at for run in runs}
        self.lengths: dict[str, float] = {}
        self.kids: dict[str, list[Run]] = {}
        for run in runs:
            if run.parent_run_id in self.by_id and run.parent_run_id != run.run_id:
                self.kids.setdefault(run.parent_run_id, []).append(run)

    def child(self, run_id: str | None, parent: Run) -> Run | None:
        child = self.by_id.get(run_id) if run_id else None
        return child if child is not None and child.parent_run_id == parent.run_id else None

    def parts(self, run: Run) -> list[tuple[str, object, Run | None]]:
        """(kind, part, child run) in the order agno ran them: each iteration's model
        calls, then its tool calls (a delegation with the member run it started), or the
        step run of a workflow step."""
        delegated = delegations(run)
        members = {
            id(call): self.child(interaction.member_run_id, run)
            for call, interaction in zip(delegated, run.member_interactions, strict=False)
        }
        found: list[tuple[str, object, Run | None]] = []
        for iteration in run.iterations:
            step = self.child(
                value if isinstance(value := iteration.metadata.get("step_run_id"), str) else None, run
            )
            if step is not None:
                found.append(("step", iteration, step))
                continue
            found.extend(("call", call, None) for call in iteration.model_calls)
            found.extend(("tool", call, members.get(id(call))) for call in iteration.tool_calls)
        return found

    def length(self, run: Run) -> float:
        """How long the run's parts take end to end, at least its measured duration."""
        if run.run_id in self.lengths:
            return self.lengths[run.run_id]
        self.lengths[run.run_id] = self.durations[run.run_id]  # a run met again inside itself
        total = 0.0
        for kind, part, child in self.parts(run):
            if child is not None:
                total += self.length(child)
            if kind in ("call", "tool"):
                total += _seconds(part.started_at, part.ended_at)  # type: ignore[attr-defined]
        self.lengths[run.run_id] = max(total, self.durations[run.run_id])
        return self.lengths[run.run_id]

    def anchors(self, run: Run, offset: float, found: list[float], seen: set[str] | None = None) -> None:
        """The start each exact tool time gives the tree (its start less the parts before
        it, laid end to end from the tree's start)."""
        seen = set() if seen is None else seen
        if run.run_id in seen:
            return
        seen.add(run.run_id)
        for kind, part, child in self.parts(run):
            if child is not None:
                self.anchors(child, offset, found, seen)
                offset += self.length(child)
            if kind == "tool" and child is None and part.started_at is not None:  # type: ignore[attr-defined]
                found.append(part.started_at.timestamp() - offset)  # type: ignore[attr-defined]
            if kind in ("call", "tool"):
                offset += _seconds(part.started_at, part.ended_at)  # type: ignore[attr-defined]


def _shift(when: datetime, seconds: float) -> datetime:
    return when + timedelta(seconds=seconds)


class _Placer:
    def __init__(self, tree: _Tree):
        self.tree = tree
        self.placed: set[str] = set()

    def run(self, run: Run, start: datetime) -> datetime:
        """Place ``run`` from ``start`` (never before its own whole second); returns its end."""
        if run.run_id in self.placed:  # named by two delegations, or inside itself: placed once
            return max(start, run.ended_at or start)
        self.placed.add(run.run_id)
        floor = self.tree.floors.get(run.run_id)
        if floor is not None and start < floor:
            start = floor
        run.started_at = start
        run.metadata["time_estimated"] = True
        estimated_tools: list[str] = []
        position = start
        unlinked: datetime | None = None  # where a delegation no member run was linked to starts
        parts = self.tree.parts(run)
        parallel: tuple[object, datetime, datetime] | None = None  # (group, its start, its end so far)
        for n, (kind, part, child) in enumerate(parts):
            if kind == "step":
                group = _parallel_group(part)  # type: ignore[arg-type]
                if group is not None and parallel is not None and parallel[0] == group:
                    # A branch of the Parallel step before it: they ran side by side.
                    end = self.step(part, child, parallel[1])  # type: ignore[arg-type]
                    parallel = (group, parallel[1], max(parallel[2], end))
                    position = parallel[2]
                else:
                    start = position
                    position = self.step(part, child, position)  # type: ignore[arg-type]
                    parallel = (group, start, position) if group is not None else None
            elif kind == "call":
                following = parts[n + 1] if n + 1 < len(parts) else None
                position = self.model_call(part, position, following)  # type: ignore[arg-type]
            elif child is not None:
                position = self.delegation(part, child, position)  # type: ignore[arg-type]
                estimated_tools.append(part.call_id or part.tool)  # type: ignore[attr-defined]
            else:
                position, exact = self.tool(part, position)  # type: ignore[arg-type]
                if not exact:
                    estimated_tools.append(part.call_id or part.tool)  # type: ignore[attr-defined]
                if unlinked is None and is_delegation(part.tool, part.params):  # type: ignore[attr-defined]
                    unlinked = part.started_at  # type: ignore[attr-defined]
        position = max(position, self.unlinked_children(run, unlinked or start))
        end = max(_shift(start, self.tree.durations[run.run_id]), position)
        run.ended_at = end
        if estimated_tools:
            run.metadata["estimated_tool_times"] = estimated_tools
        return end

    def unlinked_children(self, run: Run, start: datetime) -> datetime:
        """Member runs of ``run`` no delegation was linked to (a delegation to every
        member, say) run one after another from its first delegation that names no
        member run (else from its start); returns when the last ends."""
        position = start
        for child in self.tree.kids.get(run.run_id, []):
            if child.run_id not in self.placed:
                position = self.run(child, position)
        return position

    def model_call(self, call: ModelCall, position: datetime, following: tuple | None) -> datetime:
        """A call ends no earlier than the whole second agno stored as its answer's time,
        and, when the next part is a tool with an exact start, when that tool starts."""
        if call.ended_at is None and call.started_at is None:
            if "reconstructed" in call.metadata:
                # A call agno made but kept no time for (rebuilt from agno's code: a parser,
                # output or compression model's): an instant where the run had got to.
                call.started_at = call.ended_at = position
                call.metadata["time_estimated"] = True
            return position
        seconds = _seconds(call.started_at, call.ended_at)
        start = position
        floor = call.ended_at  # the whole second agno stored: the answer came within it
        if floor is not None and _shift(start, seconds) < floor:
            start = _shift(floor, -seconds)
        if following is not None and following[0] == "tool" and following[2] is None:
            tool = following[1]
            if tool.started_at is not None and _shift(start, seconds) <= tool.started_at:
                start = _shift(tool.started_at, -seconds)
        call.started_at, call.ended_at = start, _shift(start, seconds)
        call.metadata["time_estimated"] = True
        return call.ended_at

    def tool(self, call: ToolCall, position: datetime) -> tuple[datetime, bool]:
        """A tool call keeps the exact times agno measured when they come after the parts
        before it; else it is placed after them, lasting as long."""
        if call.started_at is not None and call.ended_at is not None and call.started_at >= position:
            return call.ended_at, True
        seconds = _seconds(call.started_at, call.ended_at)
        call.started_at, call.ended_at = position, _shift(position, seconds)
        return call.ended_at, False

    def delegation(self, call: ToolCall, member: Run, position: datetime) -> datetime:
        """A delegation spans the member run it started, then the team's own handling of
        the answer (what agno's timer for it measured)."""
        handling = _seconds(call.started_at, call.ended_at)
        call.started_at = position
        end = self.run(member, position)
        call.ended_at = _shift(end, handling)
        return call.ended_at

    def step(self, iteration: Iteration, step: Run, position: datetime) -> datetime:
        iteration.ended_at = self.run(step, position)
        # The step began when its run did (never before the whole second agno stored).
        iteration.started_at = step.started_at or position
        iteration.metadata["time_estimated"] = True
        return iteration.ended_at


def _parallel_group(iteration: Iteration) -> object | None:
    """The innermost Parallel step a workflow step ran inside (its number in the run), or
    None: the branches of one Parallel step are placed side by side."""
    within = iteration.metadata.get("within")
    if not isinstance(within, list):
        return None
    groups = [w.get("group") for w in within if isinstance(w, dict) and w.get("type") == "Parallel"]
    return groups[-1] if groups else None


def _timed(runs: Iterable[Run]) -> list[tuple[object, datetime | None, datetime | None, dict | None]]:
    """Every run, iteration, model call and tool call of ``runs`` with its times and a copy
    of its metadata, to put back if placing fails."""
    found: list[tuple[object, datetime | None, datetime | None, dict | None]] = []
    for run in runs:
        found.append((run, run.started_at, run.ended_at, dict(run.metadata)))
        for iteration in run.iterations:
            found.append((iteration, iteration.started_at, iteration.ended_at, dict(iteration.metadata)))
            found += [(c, c.started_at, c.ended_at, dict(c.metadata)) for c in iteration.model_calls]
            found += [(c, c.started_at, c.ended_at, None) for c in iteration.tool_calls]
        found += [(c, c.started_at, c.ended_at, dict(c.metadata)) for c in run.model_calls]
    return found


def place_times(runs: Iterable[Run]) -> None:
    """Order the times of ``runs`` (those of one import, parents and children together)
    in place, each tree from its top-level run: see the module's docstring. Where a tree's
    times cannot be placed inside the range every store holds (figures no real run has),
    they are all left as agno gave them."""
    runs = list(runs)
    tree = _Tree(runs)
    saved = _timed(runs)
    ended: dict[str, datetime] = {}  # where the session's latest placed tree ends
    try:
        for run in runs:
            if run.parent_run_id in tree.by_id or run.started_at is None:
                continue
            offsets: list[float] = []
            tree.anchors(run, 0.0, offsets)
            floor = run.started_at
            start = floor
            if offsets and floor.tzinfo is not None:
                exact = datetime.fromtimestamp(min(offsets), tz=floor.tzinfo)
                start = min(max(exact, floor), floor + _WITHIN_SECOND)
            # Runs of one session stored in the same second ran one after another, in the
            # order agno lists them: a run starts after the one before it ended, as long
            # as that is within its own second.
            before = ended.get(run.session_id)
            if before is not None and before > start and before.tzinfo == start.tzinfo:
                start = min(before, floor + _WITHIN_SECOND)
            ended[run.session_id] = _Placer(tree).run(run, start)
        for item, *_ in _timed(runs):
            for when in (item.started_at, item.ended_at):  # type: ignore[attr-defined]
                if when is not None:
                    check_time_range(when)
    except (OverflowError, OSError, ValueError):
        for item, started, ended, metadata in saved:
            item.started_at, item.ended_at = started, ended  # type: ignore[attr-defined]
            if metadata is not None:
                item.metadata.clear()  # type: ignore[attr-defined]
                item.metadata.update(metadata)  # type: ignore[attr-defined]
