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

import atexit
import contextvars
import copy
import inspect
import json
import logging
import os
import queue
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

from . import jsonstream
from . import messages as wire
from . import usage as usage_
from .formats import autourgos
from .formats.autourgos import (  # noqa: F401 (re-exported)
    AUTOURGOS_MAX_CHARS,
    AUTOURGOS_TRUNCATION,
    iter_autourgos_markdown,
    render_autourgos_markdown,
)
from .records import InjectedContext, Iteration, ModelCall, ModelMessage, Run, ToolCall
from .redact import Redactor
from .text import SOURCE_REDACTED, thought_text  # noqa: F401 (SOURCE_REDACTED re-exported)

logger = logging.getLogger(__name__)

_current_run: contextvars.ContextVar[Run | None] = contextvars.ContextVar("agent_history_run", default=None)


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


def _raw_agent_name(agent: Any) -> Any:
    """The name autourgos-history writes, as it writes it: the agent's ``name``, else its
    class name (a name that is not a string is written as it is)."""
    return getattr(agent, "name", None) or (agent.__class__.__name__ if agent else "Agent")


def _agent_name(agent: Any) -> str:
    name = _raw_agent_name(agent)
    return name if isinstance(name, str) else str(name)


def parse_json_object(text: Any) -> dict[str, Any]:
    """autourgos-agent's ``parse_json_object``, which autourgos-history uses to find a
    thought: the first fenced ``{…}`` block, else the widest ``{…}`` span, else its longest
    prefix that parses (tried from the last ``}``: as many as fit in ``_PREFIX_BUDGET``
    characters parsed, at least ``_PREFIX_TRIES``; the package tries every one, quadratic
    on hostile text). ``{}`` when none parses."""
    if not text or not isinstance(text, str):
        return {}
    fenced = _FENCED_OBJECT.search(text)
    if fenced:
        try:
            return json.loads(fenced.group(1))
        except ValueError:
            pass
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        raw = text[start : end + 1]
        try:
            return json.loads(raw)
        except ValueError:
            closes = [i for i, ch in enumerate(raw) if ch == "}"]
            tries = max(_PREFIX_TRIES, _PREFIX_BUDGET // len(raw))
            for close in reversed(closes[-tries:]):
                try:
                    return json.loads(raw[: close + 1])
                except ValueError:
                    continue
    return {}


_FENCED_OBJECT = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)
# The prefixes tried: at least 256, and as many as fit in 4 million characters parsed (a
# few-kilobyte answer gets every one of its "}" tried, as the package does).
_PREFIX_TRIES = 256
_PREFIX_BUDGET = 4_000_000


def thought_from_response(response: Any) -> Any:
    """autourgos-history's rule: the ``thought`` of the JSON object in the response
    (fenced or not, after a preamble or not), else the response as text; None (native
    tool calling, where the model's text is not available) leaves the thought unset."""
    if response is None:
        return None
    thought = None
    if isinstance(response, str):
        try:  # a RecursionError of a deeply nested answer: the package falls back too
            parsed = parse_json_object(response)
        except RecursionError:
            parsed = {}
        if isinstance(parsed, dict) and "thought" in parsed:
            thought = parsed["thought"]
    if not thought:
        thought = str(response)
    return thought


def file_paths(file_path: str | None, folder: str | None, stem: str) -> tuple[Path, Path]:
    """Where autourgos-history writes a run's Markdown and JSON files: ``file_path`` as
    given (inside ``folder`` when it is relative and a folder is set), else
    ``folder/<stem>.md``, else ``./Agent History/<stem>.md`` (from the working directory
    at the start of the run); a ``.json`` ``file_path`` names the JSON file and the
    Markdown is its ``.md`` twin, any other names the Markdown and the JSON is its twin."""
    if file_path:
        md = os.path.join(folder, file_path) if folder and not os.path.isabs(file_path) else file_path
    elif folder:
        md = os.path.join(folder, f"{stem}.md")
    else:
        md = os.path.join(os.getcwd(), "Agent History", f"{stem}.md")
    if md.endswith(".json"):
        return Path(os.path.splitext(md)[0] + ".md"), Path(md)
    return Path(md), Path(os.path.splitext(md)[0] + ".json")


# What an LLM wrapper reports in on_llm_end's keyword arguments (autourgos-agent 3.11:
# ``_extract_llm_metadata``), kept per iteration and summed on the run.
LLM_USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens", "total_cost", "latency_ms")


def _model_name(source: Any) -> str:
    """A model's name as a client or its response carries it (``model``, ``model_name``)."""
    for key in ("model", "model_name", "model_id"):
        value = source.get(key) if isinstance(source, Mapping) else getattr(source, key, None)
        if isinstance(value, str) and value:
            return value
    return ""


def _finish_reason(raw: Any) -> str:
    """Why the model stopped, as an OpenAI- or Anthropic-style response says it."""
    if isinstance(raw, Mapping):
        value = raw.get("finish_reason") or raw.get("stop_reason")
        choices = raw.get("choices")
    else:
        value = getattr(raw, "finish_reason", None) or getattr(raw, "stop_reason", None)
        choices = getattr(raw, "choices", None)
    if not value and isinstance(choices, list | tuple) and choices:
        first = choices[0]
        value = (
            first.get("finish_reason")
            if isinstance(first, Mapping)
            else getattr(first, "finish_reason", None)
        )
    return value[:64] if isinstance(value, str) else ""


_ROLE_PARTS = {"system": "instructions", "developer": "instructions", "assistant": "run", "tool": "run"}


def _messages(messages: Any, input_at: int | None = None) -> tuple[list[ModelMessage], int | None]:
    """Messages a client was called with, as records: chat messages (dicts or objects),
    or a bare prompt (one user message); and the index of the run's new input among them.

    The new input is the last user message of the run's first call (``input_at`` None):
    user and assistant messages before it are history replayed from earlier runs. Later
    calls of the run resend the same list and add to it, so the input keeps its index and
    what comes after it is the run's own turns."""
    if messages is None:
        return [], input_at
    if isinstance(messages, str):
        return [ModelMessage(role="user", content=messages, part="input")], 0
    # Kept as sent: role verbatim, parts, tool-call requests, tool_call_id, name.
    found = [wire.chat_message(m) for m in (messages if isinstance(messages, list | tuple) else [messages])]
    if input_at is None or input_at >= len(found) or found[input_at].role != "user":
        input_at = max((n for n, m in enumerate(found) if m.role == "user"), default=None)
    for n, kept in enumerate(found):
        kept.role = kept.role or "user"
        if kept.role in _ROLE_PARTS and _ROLE_PARTS[kept.role] == "instructions":
            kept.part = "instructions"
        elif input_at is None:
            kept.part = _ROLE_PARTS.get(kept.role, "")
        else:
            kept.part = "history" if n < input_at else "input" if n == input_at else "run"
    return found, input_at


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


class FileWriter:
    """One thread that does a middleware's work off the agent's thread, in the order it was
    asked for (autourgos-history has the same: an executor of one worker). A middleware
    has two: one writes the files, one hands finished runs to the sinks, so a slow or
    stuck sink never holds up the files.

    A task that raises (anything, ``SystemExit`` included) is logged and the next ones go
    on; ``flush`` waits until the tasks asked for before it are done (not for an empty
    queue: producers may go on); every writer is flushed when the interpreter exits, 30 s
    in all, with a warning for what is left. A SIGKILL loses what is still queued: the
    sections of runs in progress, the last file of runs that had just ended, and their
    delivery to the sinks."""

    _all: weakref.WeakSet[FileWriter] = weakref.WeakSet()

    def __init__(self, name: str = "agent-history-files") -> None:
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._done = threading.Condition()
        self._asked = 0  # tasks submitted
        self._finished = 0  # tasks done (in order: one thread)
        FileWriter._all.add(self)

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            self._asked += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            self._queue.put((fn, args))

    def _work(self) -> None:
        while True:
            fn, args = self._queue.get()
            try:
                fn(*args)
            except BaseException:  # noqa: BLE001 — a recording problem must never stop the others
                logger.exception("agent history: %s: a task failed", self.name)
            finally:
                with self._done:
                    self._finished += 1
                    self._done.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every task asked for before this call is done (or ``timeout`` ran
        out); True when they are."""
        with self._lock:
            target = self._asked
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._done:
            while self._finished < target:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._done.wait(remaining)
        return True

    @property
    def pending(self) -> int:
        return self._asked - self._finished

    @classmethod
    def flush_all(cls, timeout: float = 30.0) -> None:
        """At exit: every writer flushed, ``timeout`` seconds for all of them together."""
        deadline = time.monotonic() + timeout
        for writer in list(cls._all):
            if not writer.flush(max(0.0, deadline - time.monotonic())):
                logger.warning(
                    "agent history: %s: %d task(s) not done at exit, lost", writer.name, writer.pending
                )


atexit.register(FileWriter.flush_all)


def _snapshot(iteration: Iteration) -> Iteration:
    """A copy of an iteration as it is now: its calls copied, their values shared (the
    agent does not change a value it passed)."""
    copied = copy.copy(iteration)
    copied.tool_calls = [copy.copy(call) for call in iteration.tool_calls]
    copied.metadata = dict(iteration.metadata)
    return copied


def _reports(text: str | None, name: str, error: str) -> bool:
    """Whether a tool's result is the agent's report of ``error`` (autourgos returns
    ``"Error executing '<tool>': <error>"``, or for a timeout the error's own text)."""
    return text is not None and (text == f"Error executing '{name}': {error}" or text == error)


class _State:
    """One run in progress: the canonical record, the raw values autourgos writes, and
    the order in which tool results and errors arrived."""

    def __init__(self, run: Run, query: Any, agent: Any, md_path: Path, json_path: Path):
        self.run = run
        self.query = query
        self.agent = agent
        self.md_path = md_path
        self.json_path = json_path
        self.thoughts: dict[int, Any] = {}
        self.responses: dict[int, Any] = {}  # the model's text per iteration, read off the agent's thread
        # Per iteration, [call, kind] in the order results and errors arrived (the call is
        # None while an error waits for the result that names it, in ``pending``).
        self.arrivals: dict[int, list[list[Any]]] = {}
        self.pending: list[tuple[Iteration, str, str, list[Any]]] = []
        self.raw_names: dict[int, Any] = {}  # tool names that were not strings, as given
        # The next model call's messages and start, from on_llm_start or the wrapped client.
        self.llm_messages: list[ModelMessage] | None = None
        self.llm_started: datetime | None = None
        # Where the run's new input is in its calls' messages (set by the first call).
        self.input_at: int | None = None
        self.agent_name: Any = run.agent_name
        self.written = 0  # iterations already in the Markdown file
        self.final: Any = None
        self.lock = threading.RLock()

    def thought_of(self, iteration: Iteration, key: int | None = None) -> Any:
        """The thought autourgos-history writes for ``iteration`` (``key``: the id of the
        iteration it is a copy of), from the model's text, worked out once by the writer."""
        key = id(iteration) if key is None else key
        if key not in self.responses:
            return iteration.thought
        if key not in self.thoughts:
            self.thoughts[key] = thought_from_response(self.responses[key])
        return self.thoughts[key]

    def tool_name(self, call: ToolCall) -> Any:
        """A call's tool name as the agent gave it."""
        return self.raw_names.get(id(call), call.tool)

    def iteration(self) -> Iteration:
        if not self.run.iterations:
            self.run.iterations.append(Iteration(index=1, started_at=_now()))
        return self.run.iterations[-1]


# The hooks autourgos-agent calls on a handler (and autourgos-history answers).
CALLBACKS = (
    "on_agent_start",
    "on_iteration_start",
    "on_llm_start",
    "on_llm_end",
    "on_parse_error",
    "on_agent_pause",
    "on_agent_resume",
    "on_tool_start",
    "on_tool_end",
    "on_tool_error",
    "on_agent_end",
    "on_agent_error",
)


def _introspected(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` as a plain function that carries its signature: autourgos-agent inspects
    a handler's signature on every call it makes (``inspect.signature``, 10–40 µs for a
    bound method, about 1 µs for a function with ``__signature__``)."""

    def hook(*args: Any, **kwargs: Any) -> Any:
        return method(*args, **kwargs)

    hook.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    hook.__name__ = hook.__qualname__ = method.__name__
    hook.__doc__ = method.__doc__
    return hook


class AgentHistoryMiddleware:
    """Records every run of an agent to Markdown + JSON files, and optionally to sinks.

    The files are autourgos-history 2.2.9's, byte for byte where it works (the same paths,
    names, layout, ``[REDACTED]`` markers and 512-character cut), with the differences the
    README lists: secrets it misses are redacted too, ids and injected contexts are added,
    a tool error raised on a worker thread is kept, concurrent runs never mix.
    """

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
        capture_prompts: bool = False,
    ):
        self.file_path = file_path
        self.folder = folder
        self.include_query = include_query
        self.include_tools = include_tools
        self.include_observations = include_observations
        self.include_final = include_final
        self.sinks = list(sinks)
        self.capture_prompts = capture_prompts
        self.session_id = session_id or f"session-{uuid.uuid4()}"
        self.redactor = redactor or Redactor()
        self.values = autourgos.FileValues(self.redactor, max_chars=AUTOURGOS_MAX_CHARS)
        self.last_files: tuple[Path, Path] | None = None
        self._writer = FileWriter("agent-history-files")
        self._sender = FileWriter("agent-history-sinks")
        self._sink_redactor: Redactor | None = None
        self._state: contextvars.ContextVar[_State | None] = contextvars.ContextVar(
            f"agent_history_state_{id(self)}", default=None
        )
        # Runs in progress by agent, for callbacks fired where the context is empty.
        self._by_agent: dict[int, _State] = {}
        self._lock = threading.Lock()
        for name in CALLBACKS:
            setattr(self, name, _introspected(getattr(self, name)))

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
        stem = f"Task_{started:%Y%m%d_%H%M%S_%f}_{uuid.uuid4().hex[:8]}"
        md_path, json_path = file_paths(self.file_path, self.folder, stem)
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
        state = _State(run, query, agent, md_path, json_path)
        state.agent_name = _raw_agent_name(agent)
        self._state.set(state)
        if agent is not None:
            with self._lock:
                self._by_agent[id(agent)] = state
        _current_run.set(run)
        if self.capture_prompts:
            self._wrap_model_client(agent)
        self.last_files = (md_path, json_path)
        # The header is written first, as autourgos-history does: the file exists (and
        # grows an iteration at a time) while the agent works; by the writer thread.
        self._writer.submit(self._write_head, state)

    def on_iteration_start(self, iteration: int, agent: Any = None, **kwargs: Any) -> None:
        state = self._find(agent)
        if state is None:
            return
        with state.lock:
            self._flush_iterations(state)
            state.run.iterations.append(Iteration(index=int(iteration), started_at=_now()))

    def on_llm_start(self, messages: Any = None, agent: Any = None, **kwargs: Any) -> None:
        """A model is called with ``messages`` (a list of role/content dicts, or a prompt).
        autourgos-agent 3.11 fires no such hook; other agents (and ``capture_prompts``) do."""
        state = self._find(agent)
        if state is None:
            return
        if messages is None:
            messages = kwargs.get("prompts", kwargs.get("prompt"))
        # Read now: an agent may append to the same list after the call.
        with state.lock:
            received, state.input_at = _messages(messages, state.input_at)
            state.llm_messages, state.llm_started = received, _now()

    def on_llm_end(self, response: Any, agent: Any = None, **kwargs: Any) -> None:
        state = self._find(agent)
        if state is None:
            return
        with state.lock:
            iteration = state.iteration()
            self._keep_usage(state.run, iteration, kwargs)
            iteration.ended_at = _now()
            iteration.model_calls.append(self._model_call(state, response, kwargs, iteration.ended_at))
            if response is None:
                return  # native tool calling: no text this turn; the thought stays unset
            # The thought is read from it by the writer, off the agent's thread.
            state.responses[id(iteration)] = response
            state.thoughts.pop(id(iteration), None)

    def on_parse_error(
        self, iteration: int, raw_response: Any = None, agent: Any = None, **kwargs: Any
    ) -> None:
        """The model's answer was not the JSON the agent expects (its text is the thought)."""
        state = self._find(agent)
        if state is None:
            return
        with state.lock:
            state.iteration().metadata["parse_error"] = True
            state.run.metrics["parse_errors"] = state.run.metrics.get("parse_errors", 0) + 1

    def on_agent_pause(self, iteration: int, reason: Any = None, agent: Any = None, **kwargs: Any) -> None:
        self._event(
            agent, {"event": "paused", "iteration": iteration, "reason": reason, "at": _now().isoformat()}
        )

    def on_agent_resume(
        self, iteration: int, paused_duration: Any = None, agent: Any = None, **kwargs: Any
    ) -> None:
        seconds = _number(paused_duration)
        self._event(
            agent,
            {"event": "resumed", "iteration": iteration, "paused_seconds": seconds, "at": _now().isoformat()},
        )

    def on_tool_start(self, tool_name: str, tool_input: Any = None, agent: Any = None, **kwargs: Any) -> None:
        state = self._find(agent)
        if state is None:
            return
        with state.lock:
            call = ToolCall(tool=str(tool_name), params=tool_input, started_at=_now())
            state.iteration().tool_calls.append(call)
            if not isinstance(tool_name, str):
                state.raw_names[id(call)] = tool_name

    def on_tool_end(self, tool_name: str, tool_output: Any = None, agent: Any = None, **kwargs: Any) -> None:
        raw = None if isinstance(tool_name, str) else tool_name
        self._finish_tool(agent, str(tool_name), result=tool_output, raw_name=raw)

    def on_tool_error(self, tool_name: str, error: Any = None, agent: Any = None, **kwargs: Any) -> None:
        raw = None if isinstance(tool_name, str) else tool_name
        self._finish_tool(agent, str(tool_name), error=str(error), raw_name=raw)

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
        """Wait until every file asked for is written and every sink has delivered what it
        was given; True when all did."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def remaining() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        written = self._writer.flush(timeout)  # the files, then the hand-over to the sinks
        handed = self._sender.flush(remaining())
        # A sink's ``flush`` reports what happened since its previous one, once: waiting
        # through ``wait`` where it has one leaves that report to the sink's owner.
        waits = [getattr(sink, "wait", None) or sink.flush for sink in self.sinks if hasattr(sink, "flush")]
        return written and handed and all(wait(remaining()) for wait in waits)

    # -- internals ----------------------------------------------------------------------

    def _event(self, agent: Any, event: dict[str, Any]) -> None:
        state = self._find(agent)
        if state is None:
            return
        with state.lock:
            state.run.metadata.setdefault("events", []).append(event)

    @staticmethod
    def _keep_usage(run: Run, iteration: Iteration, kwargs: Mapping[str, Any]) -> None:
        """Tokens, cost, latency and provider as the LLM wrapper reported them: on the
        iteration as they came, summed on the run (``metrics``)."""
        usage: dict[str, Any] = {}
        for key in LLM_USAGE_KEYS:
            value = _number(kwargs.get(key))
            if value is not None:
                usage[key] = value
        provider = kwargs.get("provider_used")
        if isinstance(provider, str) and provider:
            usage["provider"] = provider
        model = kwargs.get("model")
        if isinstance(model, str) and model:
            usage["model"] = model
        run.metrics["llm_calls"] = run.metrics.get("llm_calls", 0) + 1
        if not usage:
            return
        for key in LLM_USAGE_KEYS:
            if key in usage:
                run.metrics[key] = run.metrics.get(key, 0) + usage[key]
        if "input_tokens" in usage and "output_tokens" in usage and "total_tokens" not in usage:
            run.metrics["total_tokens"] = (
                run.metrics.get("total_tokens", 0) + usage["input_tokens"] + usage["output_tokens"]
            )
        for key in ("provider", "model"):
            if key in usage:
                run.metrics[key] = usage[key]

    def _model_call(
        self, state: _State, response: Any, kwargs: Mapping[str, Any], ended: datetime
    ) -> ModelCall:
        """The model call ``on_llm_end`` reports: its text, what the client reported
        (``_extract_llm_metadata``: provider_used, tokens, total_cost, latency_ms; ``raw``,
        the client's own response), and the messages ``on_llm_start`` gave, if any."""
        raw = kwargs.get("raw")
        call = usage_.call_from_usage(kwargs)
        call.model = call.model or _model_name(raw) or _model_name(getattr(state.agent, "llm", None))
        call.output = response if isinstance(response, str) or response is None else str(response)
        call.finish_reason = _finish_reason(raw) or ("tool_calls" if response is None else "")
        if call.cost is not None:
            call.price_source = f"reported by {call.provider or 'the model client'}"
        latency = usage_.number(kwargs.get("latency_ms"), usage_.MAX_SECONDS * 1000)
        call.ended_at = ended
        if latency is not None:
            call.metadata["reported_latency_ms"] = latency
        if state.llm_started is not None:  # measured here: the call's own start
            call.started_at = state.llm_started
        elif latency is not None:
            call.started_at = usage_.start_before(ended, latency / 1000)
        call.messages = state.llm_messages or []
        if call.messages:
            call.messages_source, call.api = "middleware", wire.CHAT
        answer, reason = wire.chat_answer(raw)
        if answer is not None:
            call.answer = answer
            call.finish_reason = call.finish_reason or reason[:64]
            if call.output is None:
                call.output = wire.answer_text(answer)
        state.llm_messages = state.llm_started = None
        return call

    def _wrap_model_client(self, agent: Any) -> None:
        """``capture_prompts``: wrap the agent's model client (``agent.llm``'s invoke,
        ainvoke, invoke_with_tools, ainvoke_with_tools) so each call's messages are kept
        (autourgos-agent passes them to no hook). Once per client and middleware."""
        llm = getattr(agent, "llm", None)
        if llm is None:
            return
        marker = f"_agent_history_wrapped_{id(self)}"
        if getattr(llm, marker, False):
            return
        for name in ("invoke", "ainvoke", "invoke_with_tools", "ainvoke_with_tools"):
            original = getattr(llm, name, None)
            if callable(original):
                try:
                    setattr(llm, name, self._capturing(original, agent))
                except (AttributeError, TypeError):  # a client that takes no attributes
                    logger.warning("agent history: cannot capture prompts of %r", type(llm).__name__)
                    return
        with suppress(AttributeError, TypeError):
            setattr(llm, marker, True)

    def _capturing(self, original: Callable[..., Any], agent: Any) -> Callable[..., Any]:
        def note(messages: Any) -> None:
            try:
                self.on_llm_start(messages, agent=agent)
            except Exception:  # noqa: BLE001 — recording must never break the agent
                logger.exception("agent history: could not keep a prompt")

        if inspect.iscoroutinefunction(original):

            async def acaptured(messages: Any, *args: Any, **kwargs: Any) -> Any:
                note(messages)
                return await original(messages, *args, **kwargs)

            return acaptured

        def captured(messages: Any, *args: Any, **kwargs: Any) -> Any:
            note(messages)
            return original(messages, *args, **kwargs)

        return captured

    def _finish_tool(
        self, agent: Any, name: str, *, result: Any = None, error: str | None = None, raw_name: Any = None
    ) -> None:
        state = self._find(agent)
        if state is None:
            return
        with state.lock:
            if error is not None:
                self._tool_error(state, name, error, raw_name)
            else:
                text = result if isinstance(result, str) or result is None else str(result)
                self._tool_result(state, name, text, raw_name)

    @staticmethod
    def _latest_with(state: _State, name: str) -> Iteration:
        """The latest iteration holding a call of ``name`` (a tool ends in the iteration
        that called it), else the current one."""
        for iteration in reversed(state.run.iterations):
            if any(call.tool == name for call in iteration.tool_calls):
                return iteration
        return state.iteration()

    def _alone(self, state: _State, iteration: Iteration, name: str, raw_name: Any) -> ToolCall:
        """An answer for no started call: an observation on its own (a call with no
        parameters), as autourgos-history writes it."""
        call = ToolCall(tool=name)
        iteration.tool_calls.append(call)
        if raw_name is not None:
            state.raw_names[id(call)] = raw_name
        return call

    def _tool_error(self, state: _State, name: str, error: str, raw_name: Any) -> None:
        """``on_tool_error``: the error of the one call of ``name`` still running. With
        several running (parallel calls of one tool), which one raised is not said: the
        error waits for the result that names it (``"Error executing '…': <error>"``, or
        the same text for a timeout) and joins that call."""
        iteration = self._latest_with(state, name)
        running = [c for c in iteration.tool_calls if c.tool == name and c.result is None and c.error is None]
        entry: list[Any] = [None, "error"]
        state.arrivals.setdefault(id(iteration), []).append(entry)
        if len(running) > 1:
            state.pending.append((iteration, name, error, entry))
            return
        call = running[0] if running else self._alone(state, iteration, name, raw_name)
        call.error, call.ended_at = error, _now()
        entry[0] = call

    def _tool_result(self, state: _State, name: str, text: str | None, raw_name: Any) -> None:
        """``on_tool_end``: the result of the call whose error it reports, else of the
        first call of ``name`` still running (autourgos reports results in call order),
        else of the first that raised and waits for what the agent returned."""
        iteration = self._latest_with(state, name)
        waiting = [c for c in iteration.tool_calls if c.tool == name and c.result is None]
        call = next((c for c in waiting if c.error is not None and _reports(text, name, c.error)), None)
        call = call or next((c for c in waiting if c.error is None), None) or next(iter(waiting), None)
        if call is None:
            call = self._alone(state, iteration, name, raw_name)
        call.result, call.ended_at = text, _now()
        state.arrivals.setdefault(id(iteration), []).append([call, "result"])
        if call.error is None:
            for item in state.pending:
                if item[0] is iteration and item[1] == name and _reports(text, name, item[2]):
                    call.error, item[3][0] = item[2], call
                    state.pending.remove(item)
                    break

    def _settle_pending(self, state: _State) -> None:
        """Errors no result named go to the first call of their tool without one."""
        for iteration, name, error, entry in state.pending:
            call = next((c for c in iteration.tool_calls if c.tool == name and c.error is None), None)
            call = call or self._alone(state, iteration, name, None)
            call.error, entry[0] = error, call
            call.ended_at = call.ended_at or _now()
        state.pending.clear()

    def _observation_orders(self, state: _State) -> None:
        """Keep, on each iteration not yet written, the order its results and errors
        arrived in, where it is not the one the writer assumes (errors first, then
        results, in call order)."""
        self._settle_pending(state)
        for iteration in state.run.iterations[state.written :]:
            arrivals = state.arrivals.get(id(iteration))
            if not arrivals:
                continue
            positions = {id(call): n for n, call in enumerate(iteration.tool_calls)}
            order = [[positions[id(call)], kind] for call, kind in arrivals if id(call) in positions]
            if order != autourgos.usual_order(order):
                iteration.metadata[autourgos.OBSERVATION_ORDER] = order
            else:
                iteration.metadata.pop(autourgos.OBSERVATION_ORDER, None)

    def _write_markdown(self, state: _State, text: str, *, mode: str = "a") -> None:
        try:
            state.md_path.parent.mkdir(parents=True, exist_ok=True)
            with open(state.md_path, mode, encoding="utf-8") as handle:
                handle.write(text)
        except OSError:
            logger.warning("could not write the history file %s", state.md_path, exc_info=True)

    def _flush_iterations(self, state: _State) -> None:
        """Hand the iterations that are over to the writer, as they are now (a copy: the
        agent may still touch them), to be appended to the Markdown file."""
        self._observation_orders(state)
        for iteration in state.run.iterations[state.written :]:
            copy = _snapshot(iteration)
            for call, copied in zip(iteration.tool_calls, copy.tool_calls, strict=True):
                if id(call) in state.raw_names:
                    state.raw_names[id(copied)] = state.raw_names[id(call)]
            self._writer.submit(self._write_iteration, state, copy, id(iteration))
        state.written = len(state.run.iterations)

    def _write_head(self, state: _State) -> None:
        head = autourgos.markdown_head(
            state.run,
            values=self.values,
            query=state.query,
            include_query=self.include_query,
            agent_name=state.agent_name,
        )
        self._write_markdown(state, head, mode="w")

    def _write_iteration(self, state: _State, iteration: Iteration, key: int) -> None:
        section = autourgos.markdown_iteration(
            iteration,
            values=self.values,
            thought=state.thought_of(iteration, key),
            include_tools=self.include_tools,
            include_observations=self.include_observations,
            tool_name=state.tool_name,
        )
        self._write_markdown(state, section)

    def _finish(self, state: _State) -> None:
        """The run ended: forget it here, and hand the rest to the writer (the last
        iterations, the answer, the JSON file, then the sinks)."""
        self._state.set(None)
        if _current_run.get() is state.run:
            _current_run.set(None)
        with self._lock:
            if state.agent is not None and self._by_agent.get(id(state.agent)) is state:
                del self._by_agent[id(state.agent)]
        with state.lock:
            self._flush_iterations(state)
        self._writer.submit(self._write_end, state)

    def _write_end(self, state: _State) -> None:
        """Off the agent's thread: thoughts read from the model's text, the answer and the
        JSON file, then the record (redacted once) to every sink, whatever the files did."""
        run = state.run
        for iteration in run.iterations:
            if id(iteration) in state.responses:
                iteration.thought = thought_text(state.thought_of(iteration))
        try:
            answer = f"Error: {run.error}" if run.error is not None else state.final
            self._write_markdown(
                state, autourgos.markdown_final(answer, values=self.values, include_final=self.include_final)
            )
            data = self.autourgos_log(state)
            state.json_path.parent.mkdir(parents=True, exist_ok=True)
            state.json_path.write_text(jsonstream.dumps(data, indent=2, default=str), encoding="utf-8")
        except Exception:  # noqa: BLE001 — the sinks still get the run
            logger.warning("could not write the history file %s", state.json_path, exc_info=True)
        if self.sinks:
            self._sender.submit(self._send, run)

    def _send(self, run: Run) -> None:
        """The finished run, redacted once, to every sink (one that raises or is slow does
        not keep it from the others' turn, nor the files from being written)."""
        record = Run.from_dict(self.redactor_for_sinks().redact(run.to_dict()))
        for sink in self.sinks:
            try:
                sink.send(record)
            except Exception:  # noqa: BLE001 — the other sinks still get the run
                logger.exception("agent history: the sink %r refused a run", sink)

    def redactor_for_sinks(self) -> Redactor:
        """The files' rules without their 512-character cut (the dashboard keeps fields up
        to its own cap); built once."""
        if self._sink_redactor is None:
            self._sink_redactor = Redactor(rules=self.redactor.rule_set, extra_keys=self.redactor.extra_keys)
        return self._sink_redactor

    def autourgos_log(self, state: _State) -> dict[str, Any]:
        """The JSON document autourgos-history writes for a run, redacted, with its
        privacy flags applied, plus our ids and the injected contexts."""
        run = state.run
        return autourgos.log_document(
            run,
            values=self.values,
            thought=state.thought_of,
            query=state.query,
            final=state.final if run.status == "completed" else None,
            include_query=self.include_query,
            include_tools=self.include_tools,
            include_observations=self.include_observations,
            include_final=self.include_final,
            with_ids=True,
            tool_name=state.tool_name,
            agent_name=state.agent_name,
        )
