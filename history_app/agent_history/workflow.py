"""Workflows whose steps see the session's earlier runs (agno-go's workflow history).

A step's agent is any object with an ``instructions`` string and a ``run(input)`` method.
While the step runs, ``agent.instructions`` is the original plus ``"\\n\\n"`` plus the
history block (just the block when the original is empty); afterwards the original is
back, also when ``run`` raises. Several workflows may share one agent from several
threads: a per-agent lock makes each step's swap-run-restore one unit, so no step ever
sees another's history. Unlike agno-go, a step's ``num_history_runs`` really overrides
the workflow's, and every injected block is recorded on the run it was sent for.
"""

from __future__ import annotations

import threading
import uuid
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .context import render_workflow_history
from .recorder import record_injection, recording
from .records import Iteration, Run
from .stores import MemoryStore

_agent_locks: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_agent_locks_guard = threading.Lock()


def _lock_for(agent: Any) -> threading.RLock:
    with _agent_locks_guard:
        try:
            lock = _agent_locks.get(agent)
            if lock is None:
                lock = _agent_locks[agent] = threading.RLock()
        except TypeError:  # an agent that cannot be weakly referenced: one lock per id
            lock = _agent_locks_by_id.setdefault(id(agent), threading.RLock())
        return lock


_agent_locks_by_id: dict[int, threading.RLock] = {}


def with_history(instructions: str, block: str) -> str:
    if not block:
        return instructions
    return f"{instructions}\n\n{block}" if instructions else block


@dataclass
class Step:
    id: str
    agent: Any
    add_history_to_step: bool | None = None
    num_history_runs: int | None = None

    def __init__(
        self,
        id: str,
        agent: Any,
        *,
        add_history_to_step: bool | None = None,
        num_history_runs: int | None = None,
    ):
        self.id = id
        self.agent = agent
        self.add_history_to_step = add_history_to_step
        self.num_history_runs = num_history_runs


@dataclass
class WorkflowResult:
    run_id: str
    output: str | None
    status: str
    error: str | None = None
    history_entries: list[Run] = field(default_factory=list)
    run: Run | None = None

    @property
    def history_count(self) -> int:
        return len(self.history_entries)

    def has_history(self) -> bool:
        return bool(self.history_entries)

    def history_input(self, index: int) -> str:
        """The input of history entry ``index`` (0 = earliest, -1 = latest); ``""`` out of range."""
        try:
            return self.history_entries[index].input or ""
        except IndexError:
            return ""

    def history_output(self, index: int) -> str:
        try:
            return self.history_entries[index].output or ""
        except IndexError:
            return ""


class Workflow:
    """Runs steps in order, each step's output the next one's input, and keeps history.

    ``num_history_runs <= 0`` means every finished run (the same rule as the stores).
    A step gets history when ``enable_history`` is on and its ``add_history_to_step``
    is True, or is unset and ``add_history_to_steps`` is True.
    """

    def __init__(
        self,
        id: str,
        steps: Sequence[Step],
        *,
        store: Any = None,
        enable_history: bool = True,
        num_history_runs: int = 3,
        add_history_to_steps: bool = True,
        sinks: Iterable[Any] = (),
    ):
        self.id = id
        self.steps = list(steps)
        self.store = store if store is not None else MemoryStore()
        self.enable_history = enable_history
        self.num_history_runs = num_history_runs
        self.add_history_to_steps = add_history_to_steps
        self.sinks = list(sinks)

    def _history(self, session_id: str, session: Any, num_runs: int) -> list[Run]:
        fast = getattr(self.store, "get_history", None)
        if fast is not None:
            return fast(session_id, num_runs)
        return session.get_history(num_runs)

    def run(self, input: str, session_id: str, *, user_id: str | None = None) -> WorkflowResult:
        session = self.store.get_or_create_session(session_id, self.id, user_id)
        history = self._history(session_id, session, self.num_history_runs) if self.enable_history else []
        run = Run(
            run_id=str(uuid.uuid4()),
            session_id=session_id,
            kind="workflow",
            status="running",
            workflow_id=self.id,
            agent_name=self.id,
            user_id=user_id or "",
            framework="agent-history",
            input=input,
            started_at=datetime.now(UTC),
        )
        value: Any = input
        with recording(run):
            try:
                for position, step in enumerate(self.steps, start=1):
                    value = self._run_step(step, position, value, run, session_id, session)
                run.output = value if isinstance(value, str) or value is None else str(value)
                run.status = "completed"
            except Exception as exc:  # noqa: BLE001 — a failed step is a failed run, recorded
                run.status = "failed"
                run.error = f"{type(exc).__name__}: {exc}"
        run.ended_at = datetime.now(UTC)
        self.store.save_run(session_id, run)
        for sink in self.sinks:
            sink.send(run)
        return WorkflowResult(
            run_id=run.run_id,
            output=run.output,
            status=run.status,
            error=run.error,
            history_entries=history,
            run=run,
        )

    def _run_step(
        self, step: Step, position: int, value: Any, run: Run, session_id: str, session: Any
    ) -> Any:
        wanted = (
            step.add_history_to_step if step.add_history_to_step is not None else self.add_history_to_steps
        )
        iteration = Iteration(index=position, name=step.id, started_at=datetime.now(UTC))
        run.iterations.append(iteration)
        agent = step.agent
        block = ""
        if self.enable_history and wanted:
            num_runs = step.num_history_runs if step.num_history_runs is not None else self.num_history_runs
            entries = self._history(session_id, session, num_runs)
            block = render_workflow_history(entries)
            record_injection(
                block,
                kind="workflow_history",
                target="system",
                step=step.id,
                source_run_ids=[entry.run_id for entry in entries],
                settings={"num_history_runs": num_runs},
                run=run,
            )
        try:
            with _lock_for(agent):
                original = agent.instructions
                agent.instructions = with_history(original or "", block)
                try:
                    result = agent.run(value)
                finally:
                    agent.instructions = original
        finally:
            iteration.ended_at = datetime.now(UTC)
        output = getattr(result, "content", result)
        iteration.metadata["output"] = output if isinstance(output, str) or output is None else str(output)
        return output
