"""Recording runs: the current run, injected contexts, and the autourgos-compatible middleware.

``AgentHistoryMiddleware`` is a drop-in for autourgos-history: the same callbacks, the
same Markdown and JSON files (names and layout), plus ``run_id``/``session_id`` fields.
It fixes the original's two bugs: state lives in a fresh ``contextvars`` value set at each
``on_agent_start`` (concurrent asyncio runs never mix, and nothing leaks from an earlier
synchronous run), and a callback fired from a tool worker thread, where that context is
empty, still finds its run through the ``agent`` it names (the original dropped
``on_tool_error`` there).
"""

from __future__ import annotations

import contextvars
import json
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from .formats import autourgos
from .formats.autourgos import iter_autourgos_markdown, render_autourgos_markdown  # noqa: F401 (re-exported)
from .records import InjectedContext, Iteration, Run, ToolCall
from .redact import Redactor
from .text import SOURCE_REDACTED, thought_text  # noqa: F401 (SOURCE_REDACTED re-exported)

_current_run: contextvars.ContextVar[Run | None] = contextvars.ContextVar("agent_history_run", default=None)

AUTOURGOS_MAX_CHARS = 512
AUTOURGOS_TRUNCATION = "... [TRUNCATED]"


def current_run() -> Run | None:
    """The run being recorded in this context (by the middleware or a ``Workflow``)."""
    return _current_run.get()


@contextmanager
def recording(run: Run) -> Iterator[Run]:
    """Make ``run`` the current run for the ``with`` block (injections are recorded on it)."""
    token = _current_run.set(run)
    try:
        yield run
    finally:
        _current_run.reset(token)


def record_injection(
    text: str,
    *,
    kind: str = "custom",
    target: str = "system",
    step: str = "",
    source_run_ids: Iterable[str] = (),
    settings: Mapping[str, Any] | None = None,
    run: Run | None = None,
) -> InjectedContext | None:
    """Record an injected context on ``run`` (default: the current run); empty text is not recorded."""
    run = run or current_run()
    if run is None or not text:
        return None
    context = InjectedContext(
        text=text,
        kind=kind,
        target=target,
        step=step,
        source_run_ids=list(source_run_ids),
        settings=dict(settings or {}),
    )
    run.injected_contexts.append(context)
    return context


def _now() -> datetime:
    return datetime.now()


def _agent_name(agent: Any) -> str:
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) and name else "Agent"


_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n\s*```\s*$", re.DOTALL)


def thought_from_response(response: Any) -> Any:
    """autourgos's rule: the ``thought`` key of a JSON response, else the raw text."""
    if response is None:
        return None
    if isinstance(response, Mapping):
        return response.get("thought")
    text = response if isinstance(response, str) else str(response)
    fenced = _FENCE.match(text)
    try:
        data = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return text
    if isinstance(data, dict) and data.get("thought") is not None:
        return data["thought"]
    return text


class _State:
    """One run in progress: the canonical record plus the raw values autourgos writes."""

    def __init__(self, run: Run, query: Any, agent: Any, file_stem: str):
        self.run = run
        self.query = query
        self.agent = agent
        self.file_stem = file_stem
        self.thoughts: dict[int, Any] = {}
        self.final: Any = None
        self.lock = threading.Lock()

    def iteration(self) -> Iteration:
        if not self.run.iterations:
            self.run.iterations.append(Iteration(index=1, started_at=_now()))
        return self.run.iterations[-1]


class AgentHistoryMiddleware:
    """Records every run of an agent to Markdown + JSON files, and optionally to sinks."""

    def __init__(
        self,
        file_path: str | None = None,
        folder: str | None = None,
        include_query: bool = False,
        include_tools: bool = True,
        include_observations: bool = True,
        include_final: bool = True,
        sinks: Iterable[Any] = (),
        *,
        session_id: str | None = None,
        redactor: Redactor | None = None,
    ):
        self.file_path = file_path
        self.folder = Path(folder) if folder is not None else Path("Agent History")
        self.include_query = include_query
        self.include_tools = include_tools
        self.include_observations = include_observations
        self.include_final = include_final
        self.sinks = list(sinks)
        self.session_id = session_id or f"session-{uuid.uuid4()}"
        self.redactor = redactor or Redactor(
            max_length=AUTOURGOS_MAX_CHARS, truncation_marker=AUTOURGOS_TRUNCATION
        )
        self.last_files: tuple[Path, Path] | None = None
        self._state: contextvars.ContextVar[_State | None] = contextvars.ContextVar(
            f"agent_history_state_{id(self)}", default=None
        )
        # Runs in progress by agent, for callbacks fired where the context is empty.
        self._by_agent: dict[int, _State] = {}
        self._lock = threading.Lock()

    # -- finding the run a callback belongs to ----------------------------------------

    def _find(self, agent: Any) -> _State | None:
        state = self._state.get()
        if state is not None:
            return state
        with self._lock:
            if agent is not None and id(agent) in self._by_agent:
                return self._by_agent[id(agent)]
            if len(self._by_agent) == 1:
                return next(iter(self._by_agent.values()))
        return None

    # -- the autourgos callbacks --------------------------------------------------------

    def on_agent_start(self, query: Any, agent: Any = None, **kwargs: Any) -> None:
        started = _now()
        stem = (
            Path(self.file_path).stem
            if self.file_path
            else f"Task_{_now():%Y%m%d_%H%M%S_%f}_{uuid.uuid4().hex[:8]}"
        )
        run = Run(
            run_id=str(kwargs.get("run_id") or uuid.uuid4()),
            session_id=str(kwargs.get("session_id") or getattr(agent, "session_id", None) or self.session_id),
            kind="agent",
            status="running",
            agent_name=_agent_name(agent),
            user_id=str(kwargs.get("user_id") or ""),
            framework="autourgos",
            input=query if isinstance(query, str) else json.dumps(query, ensure_ascii=False, default=str),
            started_at=started,
        )
        state = _State(run, query, agent, stem)
        self._state.set(state)
        if agent is not None:
            with self._lock:
                self._by_agent[id(agent)] = state
        _current_run.set(run)

    def on_iteration_start(self, iteration: int, agent: Any = None, **kwargs: Any) -> None:
        state = self._find(agent)
        if state is None:
            return
        with state.lock:
            state.run.iterations.append(Iteration(index=int(iteration), started_at=_now()))

    def on_llm_end(self, response: Any, agent: Any = None, **kwargs: Any) -> None:
        state = self._find(agent)
        if state is None:
            return
        thought = thought_from_response(response)
        with state.lock:
            iteration = state.iteration()
            state.thoughts[id(iteration)] = thought
            iteration.thought = thought_text(thought)
            iteration.ended_at = _now()

    def on_tool_start(self, tool_name: str, tool_input: Any = None, agent: Any = None, **kwargs: Any) -> None:
        state = self._find(agent)
        if state is None:
            return
        with state.lock:
            state.iteration().tool_calls.append(
                ToolCall(tool=str(tool_name), params=tool_input, started_at=_now())
            )

    def on_tool_end(self, tool_name: str, tool_output: Any = None, agent: Any = None, **kwargs: Any) -> None:
        self._finish_tool(agent, str(tool_name), result=tool_output)

    def on_tool_error(self, tool_name: str, error: Any = None, agent: Any = None, **kwargs: Any) -> None:
        self._finish_tool(agent, str(tool_name), error=str(error))

    def on_agent_end(self, response: Any = None, agent: Any = None, **kwargs: Any) -> None:
        state = self._find(agent)
        if state is None:
            return
        with state.lock:
            state.final = response
            state.run.output = response if isinstance(response, str) or response is None else str(response)
            state.run.status = "completed"
            state.run.ended_at = _now()
        self._finish(state)

    def on_agent_error(self, error: Any = None, agent: Any = None, **kwargs: Any) -> None:
        state = self._find(agent)
        if state is None:
            return
        with state.lock:
            state.run.error = str(error)
            state.run.status = "failed"
            state.run.ended_at = _now()
        self._finish(state)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every sink has delivered what it was given; True when all did."""
        return all(sink.flush(timeout) for sink in self.sinks if hasattr(sink, "flush"))

    # -- internals ----------------------------------------------------------------------

    def _finish_tool(self, agent: Any, name: str, *, result: Any = None, error: str | None = None) -> None:
        state = self._find(agent)
        if state is None:
            return
        text = result if isinstance(result, str) or result is None else str(result)
        with state.lock:
            # Later iterations first: a tool ends in the iteration that called it.
            for iteration in reversed(state.run.iterations):
                call = next((c for c in iteration.tool_calls if c.tool == name and c.ended_at is None), None)
                if call is not None:
                    break
            else:
                call = ToolCall(tool=name)
                state.iteration().tool_calls.append(call)
            if error is not None:
                call.error = error
            else:
                call.result = text
            call.ended_at = _now()

    def _finish(self, state: _State) -> None:
        self._state.set(None)
        if _current_run.get() is state.run:
            _current_run.set(None)
        with self._lock:
            if state.agent is not None and self._by_agent.get(id(state.agent)) is state:
                del self._by_agent[id(state.agent)]
        data = self.autourgos_log(state)
        self.folder.mkdir(parents=True, exist_ok=True)
        json_path = self.folder / f"{state.file_stem}.json"
        md_path = self.folder / f"{state.file_stem}.md"
        json_path.write_text(json.dumps(data, indent=2), encoding="utf-8")
        md_path.write_text(
            render_autourgos_markdown(self.autourgos_log(state, for_markdown=True)), encoding="utf-8"
        )
        self.last_files = (md_path, json_path)
        if self.sinks:
            record = self.redactor_for_sinks().redact(state.run.to_dict())
            for sink in self.sinks:
                sink.send(Run.from_dict(record))

    def redactor_for_sinks(self) -> Redactor:
        # The dashboard keeps fields up to its own cap; only the files use autourgos's 512.
        return Redactor(rules=self.redactor.rule_set, extra_keys=self.redactor.extra_keys)

    def autourgos_log(self, state: _State, *, for_markdown: bool = False) -> dict[str, Any]:
        """The JSON document autourgos-history writes for a run, redacted, with its
        privacy flags applied, plus our ids and the injected contexts."""
        run = state.run
        return autourgos.log_document(
            run,
            redact=self.redactor.redact,
            thought=lambda iteration: state.thoughts.get(id(iteration), iteration.thought),
            query=state.query if isinstance(state.query, str) else run.input,
            final=state.final if run.status == "completed" else None,
            include_query=self.include_query,
            include_tools=self.include_tools,
            include_observations=self.include_observations,
            include_final=self.include_final,
            for_markdown=for_markdown,
            with_ids=True,
        )
