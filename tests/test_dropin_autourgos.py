"""Our AgentHistoryMiddleware against the real autourgos-history 2.2.9, on the real agent.

Every scenario runs the real ``autourgos-agent`` 3.11.0 with its own scripted fake models
(``ScriptedFakeLLM``, ``ScriptedToolCallLLM``), with both middlewares attached to the same
agent, and compares the files they write field for field. Where ours differs on purpose,
the scenario names the difference and the test says why (``DIFFERENCES``); nothing else
may differ. The last test ships every scenario through ``HttpSink`` to a live server.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from autourgos_agent import Agent
from autourgos_agent.testing import (
    ScriptedFakeLLM,
    ScriptedToolCallLLM,
    _FakeFunctionCall,
    _FakeToolCallResponse,
)
from autourgos_history import AgentHistoryMiddleware as Original

from history_app.agent_history import AgentHistoryMiddleware as Ours
from history_app.agent_history import parse

from .conftest import CORPORA, TOKEN

# Why ours differs where it does: the README's drop-in section lists the same.
DIFFERENCES = {
    "ids": "ours adds run_id, session_id and the injected contexts to the JSON file",
    "worker_error": (
        "a tool that raises in a synchronous run: autourgos fires on_tool_error on its tool "
        "worker thread, where the package finds no run and drops it; ours keeps the error "
        "(one more 'Error: …' observation, as the package writes it in an async run)"
    ),
    "secrets": (
        "ours redacts secrets the package misses, keeps values it mangles that are no "
        "secret (max_tokens, session_id, author…), and keeps the scheme word of a redacted "
        "'Bearer …'; every secret the package redacts is redacted by ours too"
    ),
    "cross_talk": (
        "concurrent async runs after a sync run on the same middleware: the package's runs "
        "share one state and overwrite or mix their files; ours writes each run to its own"
    ),
}


def _boom(x: str = "") -> str:
    raise ValueError(f"kaboom {x}".strip())


def _slow(seconds: float = 0.5) -> str:
    time.sleep(seconds)
    return "slept"


def _tool(name: str, func: Any, **properties: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"the {name} tool",
        "parameters": {"type": "object", "properties": {k: {"type": v} for k, v in properties.items()}},
        "func": func,
    }


TOOLS = [
    _tool("echo", lambda text="": f"echo: {text}", text="string"),
    _tool("add", lambda a=0, b=0: a + b, a="number", b="number"),
    _tool("upper", lambda text="": text.upper(), text="string"),
    _tool("big", lambda n=6000: "x" * int(n), n="number"),
    _tool("boom", _boom, x="string"),
    _tool("slow", _slow, seconds="number"),
    _tool("kw", lambda **kwargs: f"got {len(kwargs)} arguments"),
]


def turn(thought: Any = "thinking", actions: list | None = None, final: Any = None) -> str:
    """One prompt-mode model answer, as the agent's prompt asks for it."""
    body: dict[str, Any] = {"thought": thought, "actions": actions or []}
    if final is not None:
        body["final_answer"] = final
    return json.dumps(body)


def act(tool: str, **params: Any) -> dict[str, Any]:
    return {"action": tool, "action_input": params}


class UsageLLM(ScriptedFakeLLM):
    """A scripted model that reports usage the way autourgos-openaichat does with
    ``structured_output=True``: a dict with the text under ``response``."""

    def _next_response(self) -> Any:  # type: ignore[override]
        text = super()._next_response()
        n = len(self.calls)
        return {
            "response": text,
            "provider_used": "openai",
            "input_tokens": 100 * n,
            "output_tokens": 10 * n,
            "total_cost": 0.001 * n,
            "latency_ms": 250,
        }


class FailingLLM(ScriptedFakeLLM):
    """A provider that fails after its scripted answers run out."""

    def _next_response(self) -> str:
        if not self._responses:
            raise ConnectionError("HTTP 502 from the provider (api key sk-abc123def456 rejected)")
        return super()._next_response()


@dataclass
class Scenario:
    name: str
    responses: list[Any]
    mode: str = "sync"  # "sync" | "async" | "native" | "native-async"
    flags: dict[str, Any] = field(default_factory=dict)
    agent: dict[str, Any] = field(default_factory=dict)
    query: Any = "What is the weather in Tokyo?"
    llm: type = ScriptedFakeLLM
    differences: tuple[str, ...] = ()
    # What the dashboard must show for the run: tool calls, status.
    tool_calls: int = 0
    status: str = "completed"


SECRET_QUERY = "Use key sk-abc12345 and Bearer abcdefghijklmnop to call the API (token ya29.a0Af)."
SCENARIOS = [
    Scenario("final_only", [turn("easy", final="Sunny, 22 C.")]),
    Scenario("one_tool", [turn("look", [act("echo", text="hi")]), turn("done", final="ok")], tool_calls=1),
    Scenario(
        "multi_iteration",
        [
            turn("first", [act("echo", text="a")]),
            turn("second", [act("add", a=2, b=3)]),
            turn("third", [act("upper", text="tokyo")]),
            turn("done", final="TOKYO 5"),
        ],
        flags={"include_query": True},
        tool_calls=3,
    ),
    Scenario(
        "parallel_tools",
        [
            turn("fan out", [act("echo", text="a"), act("add", a=1, b=2), act("upper", text="b")]),
            turn(final="3"),
        ],
        tool_calls=3,
    ),
    Scenario(
        "parallel_tools_async",
        [
            turn("fan out", [act("echo", text="a"), act("add", a=1, b=2), act("upper", text="b")]),
            turn(final="3"),
        ],
        mode="async",
        tool_calls=3,
    ),
    Scenario(
        "tool_raises",
        [turn("try", [act("boom", x="1")]), turn("recover", final="could not")],
        differences=("worker_error",),
        tool_calls=1,
    ),
    Scenario(
        "tool_raises_async",
        [turn("try", [act("boom", x="1")]), turn(final="could not")],
        mode="async",
        tool_calls=1,
    ),
    Scenario(
        "parallel_one_raises",
        [turn("both", [act("echo", text="a"), act("boom", x="2")]), turn(final="half")],
        differences=("worker_error",),
        tool_calls=2,
    ),
    Scenario(
        "parallel_one_raises_async",
        [turn("both", [act("echo", text="a"), act("boom", x="2"), act("boom", x="3")]), turn(final="half")],
        mode="async",
        tool_calls=3,
    ),
    Scenario(
        "tool_timeout_in_order",
        [turn("wait", [act("echo", text="a"), act("slow", seconds=0.6)]), turn(final="too slow")],
        agent={"tool_timeout": 0.2},
        tool_calls=2,
    ),
    Scenario(
        "unknown_tool_and_bad_arguments",
        [turn("oops", [act("nope", x=1), act("echo", wrong="x")]), turn(final="sorry")],
        tool_calls=2,
    ),
    Scenario(
        "denied_by_approval",
        [turn("ask", [act("echo", text="a"), act("upper", text="b")]), turn(final="denied")],
        agent={"approval_callback": lambda name, args: name == "echo"},
        tool_calls=2,
    ),
    Scenario("parse_error_then_answer", ["not json at all", turn("ok now", final="fine")]),
    Scenario("parse_errors_until_failure", ["nope", "still nope", "never"], status="failed"),
    Scenario(
        "provider_error",
        [turn("one", [act("echo", text="a")])],
        llm=FailingLLM,
        status="failed",
        tool_calls=1,
    ),
    Scenario(
        "provider_error_async",
        [turn("one", [act("echo", text="a")])],
        mode="async",
        llm=FailingLLM,
        status="failed",
        tool_calls=1,
    ),
    Scenario(
        "max_iterations",
        [turn("again", [act("echo", text=str(i))]) for i in range(3)],
        agent={"max_iterations": 2},
        status="failed",
        tool_calls=2,
    ),
    Scenario(
        "fenced_thought_after_preamble",
        ['Sure:\n```json\n{"thought": "inner thought", "actions": [], "final_answer": "fin"}\n```'],
    ),
    Scenario(
        "odd_thoughts",
        [
            turn({"plan": ["a", "b"]}, [act("echo", text="x")]),
            turn("", [act("echo", text="y")]),
            turn(None, [act("echo", text="z")]),
            turn(0, final="done"),
        ],
        tool_calls=3,
    ),
    Scenario(
        "huge_values",
        [turn("t" * 700, [act("big", n=6000), act("echo", text="y" * 900)]), turn("d", final="z" * 800)],
        flags={"include_query": True},
        query="q" * 900,
        tool_calls=2,
    ),
    Scenario(
        "unicode_and_markup",
        [turn("東京 🗼 <b>bold</b> \u202e", [act("echo", text="Ünïcödé \x00 null")]), turn(final="قال ✓")],
        flags={"include_query": True},
        query="Что такое 東京? </script><script>alert(1)</script>",
        tool_calls=1,
    ),
    Scenario(
        "everything_withheld",
        [turn("secret plan", [act("echo", text="a")]), turn(final="hidden")],
        flags={
            "include_query": False,
            "include_tools": False,
            "include_observations": False,
            "include_final": False,
        },
        tool_calls=1,
    ),
    Scenario(
        "withheld_on_failure",
        [turn("x", [act("boom", x="9")])],
        flags={"include_final": False, "include_observations": False},
        llm=FailingLLM,
        mode="async",
        status="failed",
        tool_calls=1,
    ),
    Scenario(
        "secrets_everywhere",
        [
            turn(
                "Found Bearer abcdefghijklmnop and sk-short12 and ya29.a0AfH6 in the env",
                [
                    act(
                        "echo",
                        text="AKIAIOSFODNN7EXAMPLE ghp_abcdef123 xoxb-123456-abc",
                        max_tokens=4096,
                        session_id="user-123-session-7",
                        api_key="plainFAKE123",
                        author="Ada Lovelace",
                    )
                ],
            ),
            turn("done", final="The key is sk-abc123 and the JWT eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl"),
        ],
        flags={"include_query": True},
        query=SECRET_QUERY,
        differences=("secrets",),
        tool_calls=1,
    ),
    Scenario(
        "secrets_in_odd_shapes",
        [
            turn(
                "Bearer\nZQtokA12345 BeArEr ZQtokB12345 Bearer ZQtok,C1234 Bearer\u00a0ZQtokD123 Bearer ZQxyz",
                [
                    act(
                        "kw",
                        text="SK-ZQABCDEF1 GHP_ZQabcdef1 YA29.ZQx XOXB-ZQ1234567 EYJZQa.ZQb.ZQc akiazqabcdefghijkl",
                        glued="user_ghp_ZQabcdef123 _sk-ZQabcdefgh1 1sk-ZQabcdefg tokya29.ZQabc",
                        passcode="ZQpasscode1",
                        sessionid="ZQsessid1",
                        csrftoken="ZQcsrf1",
                        mysecret="ZQmysecret1",
                        userpass="ZQuserpass1",
                        task_ref="task-abcdefgh1",
                    )
                ],
            ),
            turn("done", final="ok"),
        ],
        flags={"include_query": True},
        query="Bearer " + "ZQlong1" * 700,
        differences=("secrets",),
        tool_calls=1,
    ),
    Scenario(
        "same_tool_twice_timing_out",
        [turn("wait", [act("slow", seconds=0.5), act("slow", seconds=0.4)]), turn(final="too slow")],
        agent={"tool_timeout": 0.1},
        tool_calls=2,
    ),
    Scenario(
        "same_tool_twice_raising",
        [turn("both", [act("boom", x="a"), act("boom", x="b")]), turn(final="neither")],
        differences=("worker_error",),
        tool_calls=2,
    ),
    Scenario(
        "same_tool_twice_raising_async",
        [
            turn("both", [act("echo", text="a"), act("boom", x="a"), act("boom", x="b")]),
            turn(final="neither"),
        ],
        mode="async",
        tool_calls=3,
    ),
    Scenario(
        "hostile_answers",
        [
            '{"thought":"deep","x": ' + "[" * 3000 + "]" * 3000 + ', "actions": []}',
            '{"thought":"inner","actions":[{"action":"echo","action_input":{"text":"a"}}]}' + " }" * 300,
            turn("odd names", [{"action": None, "action_input": {}}, {"action": 5, "action_input": {}}]),
            turn(final="done"),
        ],
        tool_calls=3,
    ),
    Scenario("native_final", [ScriptedToolCallLLM.final("Sunny.")], mode="native"),
    Scenario(
        "native_tools",
        [
            ScriptedToolCallLLM.tool_call("echo", {"text": "hi"}, call_id="c1"),
            ScriptedToolCallLLM.calls_(
                [
                    {"name": "add", "arguments": {"a": 1, "b": 2}},
                    {"name": "upper", "arguments": {"text": "q"}},
                ]
            ),
            ScriptedToolCallLLM.final("3 Q"),
        ],
        mode="native",
        tool_calls=3,
    ),
    Scenario(
        "native_tool_raises",
        [ScriptedToolCallLLM.tool_call("boom", {"x": "n"}), ScriptedToolCallLLM.final("failed tool")],
        mode="native",
        differences=("worker_error",),
        tool_calls=1,
    ),
    Scenario(
        "native_async_tool_raises",
        [
            _FakeToolCallResponse(
                tool_calls=[
                    _FakeFunctionCall("boom", {"x": "a"}, "c1"),
                    _FakeFunctionCall("echo", {"text": "b"}, "c2"),
                ]
            ),
            ScriptedToolCallLLM.final("done"),
        ],
        mode="native-async",
        tool_calls=2,
    ),
    Scenario(
        "usage_reported",
        [turn("one", [act("echo", text="a")]), turn("two", final="ok")],
        llm=UsageLLM,
        tool_calls=1,
    ),
]


@dataclass
class Files:
    json: dict[str, Any] | None
    md: str | None
    paths: list[Path]


@dataclass
class Pair:
    original: Files
    ours: Files
    result: Any
    middleware: Ours


def files_in(folder: Path) -> Files:
    paths = sorted(folder.rglob("*")) if folder.exists() else []
    paths = [p for p in paths if p.is_file()]
    json_files = [p for p in paths if p.suffix == ".json"]
    md_files = [p for p in paths if p.suffix == ".md"]
    assert len(json_files) <= 1 and len(md_files) <= 1, paths
    return Files(
        json.loads(json_files[0].read_text()) if json_files else None,
        md_files[0].read_text() if md_files else None,
        paths,
    )


def build_agent(scenario: Scenario, middleware: list[Any]) -> Agent:
    native = scenario.mode.startswith("native")
    llm = (ScriptedToolCallLLM if native else scenario.llm)(list(scenario.responses))
    agent = Agent(
        llm=llm, middleware=middleware, tool_calling_mode="native" if native else "prompt", **scenario.agent
    )
    agent.add_tools(*TOOLS)
    return agent


def invoke(agent: Agent, scenario: Scenario) -> Any:
    try:
        if scenario.mode in ("async", "native-async"):
            return asyncio.run(agent.ainvoke(scenario.query))
        return agent.invoke(scenario.query)
    except Exception as exc:  # the agent's own errors end the run; both middlewares saw them
        return exc


def run_both(scenario: Scenario, tmp_path: Path, *, sinks: list[Any] = ()) -> Pair:
    original = Original(folder=str(tmp_path / "original"), **scenario.flags)
    ours = Ours(folder=str(tmp_path / "ours"), sinks=list(sinks), **scenario.flags)
    result = invoke(build_agent(scenario, [original, ours]), scenario)
    original.flush()
    assert ours.flush(30)
    return Pair(files_in(tmp_path / "original"), files_in(tmp_path / "ours"), result, ours)


STARTED_AT = re.compile(r"^\*\*Started At:\*\* \d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", re.MULTILINE)


def comparable(pair: Pair) -> tuple[dict, dict, str, str]:
    """Both files with the times (which differ by microseconds) and our additions set aside."""
    original, ours = dict(pair.original.json), dict(pair.ours.json)
    assert ours.pop("run_id") and ours.pop("session_id") and isinstance(ours.pop("injected_contexts"), list)
    for document in (original, ours):
        for key in ("start_time", "end_time"):
            assert document[key] and document.pop(key)
    original_md, ours_md = pair.original.md, pair.ours.md
    assert STARTED_AT.search(original_md) and STARTED_AT.search(ours_md)
    return original, ours, STARTED_AT.sub("", original_md), STARTED_AT.sub("", ours_md)


def without_worker_errors(document: dict, markdown: str) -> tuple[dict, str]:
    """Ours less the errors the package drops in a synchronous run: an "Error: …"
    observation followed, for the same tool, by the "Error executing '…'" the agent
    returned (the only difference "worker_error" allows)."""
    document = json.loads(json.dumps(document))
    for iteration in document["iterations"]:
        observations = iteration["observations"]
        if not isinstance(observations, list):
            continue
        kept = []
        for n, obs in enumerate(observations):
            message = obs["result"][len("Error: ") :] if str(obs["result"]).startswith("Error: ") else None
            returned = f"Error executing '{obs['tool']}': {message}"
            if message is not None and any(o["result"] == returned for o in observations[n + 1 :]):
                markdown = markdown.replace(f"**{obs['tool']}**:\n{json.dumps(obs['result'])}\n\n", "", 1)
                continue
            kept.append(obs)
        iteration["observations"] = kept
    return document, markdown


def leaves(value: Any, path: str = "$") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [item for key, v in value.items() for item in leaves(v, f"{path}.{key}")]
    if isinstance(value, list):
        return [item for i, v in enumerate(value) for item in leaves(v, f"{path}[{i}]")]
    return [(path, value)]


INNOCUOUS_KEYS = {
    item["key"]
    for item in map(json.loads, (CORPORA / "innocuous.jsonl").read_text().splitlines())
    if "key" in item
}


WORD_SK = re.compile(r"(?i)([a-z])sk-[a-z0-9]{6,}")


def assert_secrets_difference_only(original: dict, ours: dict) -> None:
    """Same structure; where a value differs, both redacted something, or the package
    redacted a whole value under a key that names no secret (max_tokens, session_id…)."""
    theirs, mine = leaves(original), leaves(ours)
    assert [path for path, _ in theirs] == [path for path, _ in mine]
    for (path, a), (_, b) in zip(theirs, mine, strict=True):
        if a == b:
            continue
        key = path.rsplit(".", 1)[-1]
        if a == "[REDACTED]" and key in INNOCUOUS_KEYS:
            continue  # the package's false positive, kept by ours
        if isinstance(b, str) and a == WORD_SK.sub(lambda m: m.group(1) + "[REDACTED]", b) != b:
            continue  # its other one: "sk-" inside a word ("task-abcdefgh1") is no key
        assert "[REDACTED]" in str(a) and "[REDACTED]" in str(b), (path, a, b)


PLANTED = [
    "sk-abc12345",
    "abcdefghijklmnop",
    "ya29.a0Af",
    "sk-short12",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_abcdef123",
    "xoxb-123456-abc",
    "plainFAKE123",
    "sk-abc123",
    "eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl",
    # secrets_in_odd_shapes: every value starting ZQ is one ("ZQx" alone is too short to
    # be told from a word, so the marks are checked whole).
    *(f"ZQtok{c}" for c in "ABCD"),
    "ZQxyz",
    "ZQABCDEF1",
    "ZQabcdef1",
    "YA29.ZQx",
    "ZQ1234567",
    "EYJZQa",
    "akiazq",
    "ghp_ZQabcdef123",
    "ZQabcdefgh1",
    "ZQabcdefg",
    "ZQabc",
    "ZQpasscode1",
    "ZQsessid1",
    "ZQcsrf1",
    "ZQmysecret1",
    "ZQuserpass1",
    "ZQlong1",
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_the_same_files_as_autourgos_history(scenario, tmp_path):
    pair = run_both(scenario, tmp_path)
    assert pair.original.json is not None and pair.ours.json is not None, (
        pair.original.paths,
        pair.ours.paths,
    )
    # The same names, in the same places.
    assert [p.relative_to(tmp_path / "original").parent for p in pair.original.paths] == [
        p.relative_to(tmp_path / "ours").parent for p in pair.ours.paths
    ]
    pattern = re.compile(r"Task_\d{8}_\d{6}_\d{6}_[0-9a-f]{8}\.(json|md)")
    assert all(pattern.fullmatch(p.name) for p in pair.original.paths + pair.ours.paths)
    original, ours, original_md, ours_md = comparable(pair)
    if "worker_error" in scenario.differences:
        assert ours != original  # the difference is real: ours kept the error
        ours, ours_md = without_worker_errors(ours, ours_md)
    if "secrets" in scenario.differences:
        assert_secrets_difference_only(original, ours)
        ours_text = pair.ours.md + json.dumps(pair.ours.json)
        original_text = pair.original.md + json.dumps(pair.original.json)
        for secret in PLANTED:
            assert secret not in ours_text, secret
        # Nothing the package redacts passes through ours.
        assert not [s for s in PLANTED if s not in original_text and s in ours_text]
        return
    assert ours == original
    assert ours_md == original_md
    # Our parser reads both files to the same run (one call per failing tool, not two).
    assert parse(ours)[0].iterations == parse(original)[0].iterations
    if "worker_error" not in scenario.differences:
        assert parse(pair.ours.json)[0].iterations == parse(pair.original.json)[0].iterations


def test_every_secret_autourgos_history_redacts_is_redacted_by_ours(tmp_path):
    """The secret corpus (every kind, every placement the agent can carry) through both
    middlewares: whatever the package removes, ours removes too, and ours removes every
    one of them."""
    secrets = [json.loads(line) for line in (CORPORA / "secrets.jsonl").read_text().splitlines()]
    texts = [p["text"] for s in secrets for p in s["placements"] if "text" in p]
    params = [p["params"] for s in secrets for p in s["placements"] if "params" in p]
    responses = [turn(text, [act("echo", text=text)]) for text in texts[:40]]
    responses += [turn("params", [{"action": "echo", "action_input": p}]) for p in params[:40]]
    responses.append(turn("done", final=" ".join(texts[40:80])))
    scenario = Scenario("corpus", responses, flags={"include_query": True}, agent={"max_iterations": 100})
    pair = run_both(scenario, tmp_path)
    ours_text = pair.ours.md + json.dumps(pair.ours.json)
    original_text = pair.original.md + json.dumps(pair.original.json)
    leaked_by_original = [s["secret"] for s in secrets if s["secret"] in original_text]
    assert len(leaked_by_original) > 5  # the corpus holds shapes the package misses
    for secret in secrets:
        assert secret["secret"] not in ours_text, secret["kind"]


def test_a_sync_run_then_concurrent_async_runs_never_mix(tmp_path):
    """The package's cross-talk: after a synchronous run, concurrent asynchronous runs on
    the same middleware share its state (the tasks inherit the sync run's context), so
    their files overwrite each other and mix their iterations. Ours: one clean pair of
    files a run."""
    original = Original(folder=str(tmp_path / "original"), include_query=True)
    ours = Ours(folder=str(tmp_path / "ours"), include_query=True)
    queries = ("first", "second", "third", "fourth")

    def scenario(query: str) -> Scenario:
        steps = [
            turn(f"{query}-1", [act("slow", seconds=0.05)]),
            turn(f"{query}-2", [act("echo", text=query)]),
        ]
        return Scenario(query, [*steps, turn("end", final=query)], query=query)

    build_agent(scenario("first"), [original, ours]).invoke("first")

    async def concurrently() -> None:
        agents = [build_agent(scenario(q), [original, ours]) for q in queries[1:]]
        await asyncio.gather(*(agent.ainvoke(q) for agent, q in zip(agents, queries[1:], strict=True)))

    asyncio.run(concurrently())
    original.flush()
    assert ours.flush(30)

    def documents(folder: Path) -> list[dict]:
        return sorted((json.loads(p.read_text()) for p in folder.glob("*.json")), key=lambda d: d["query"])

    ours_docs = documents(tmp_path / "ours")
    assert sorted(d["query"] for d in ours_docs) == sorted(queries)
    for document in ours_docs:
        query = document["query"]
        assert [i["thought"] for i in document["iterations"]] == [f"{query}-1", f"{query}-2", "end"]
        assert document["final_response"] == query
    assert len(list((tmp_path / "ours").glob("*.md"))) == 4
    # The package, for the record (the difference README lists): runs lost or mixed.
    theirs = documents(tmp_path / "original")
    assert len(theirs) < 4 or any(
        [i["thought"] for i in d["iterations"]] != [f"{d['query']}-1", f"{d['query']}-2", "end"]
        for d in theirs
    )


@pytest.mark.parametrize(
    ("file_path", "folder", "expected"),
    [
        ("sub/dir/x.md", None, "sub/dir/x.md"),
        ("sub/dir/x.json", None, "sub/dir/x.md"),
        ("notes.txt", None, "notes.txt"),
        ("a/b.md", "logs", "logs/a/b.md"),
        ("ABSOLUTE/abs/y.md", "logs", "ABSOLUTE/abs/y.md"),
        (None, None, "Agent History/Task_*.md"),
        (None, "logs/deep", "logs/deep/Task_*.md"),
    ],
)
def test_file_paths_are_where_autourgos_history_puts_them(tmp_path, monkeypatch, file_path, folder, expected):
    """Relative paths keep their folders, an absolute one is used as it is, a ``.json``
    path names the JSON file: each middleware alone, from its own working directory."""
    scenario = Scenario("paths", [turn("x", [act("echo", text="a")]), turn(final="ok")])
    found = {}
    for name, cls in (("original", Original), ("ours", Ours)):
        cwd = tmp_path / name
        cwd.mkdir()
        monkeypatch.chdir(cwd)
        path = file_path.replace("ABSOLUTE", str(cwd)) if file_path else None
        middleware = cls(file_path=path, folder=folder)
        invoke(build_agent(scenario, [middleware]), scenario)
        middleware.flush()
        found[name] = sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*") if p.is_file())
    assert found["ours"] and len(found["ours"]) == len(found["original"]) == 2
    wanted = expected.replace("ABSOLUTE/", "")
    md = [p for p in found["ours"] if not p.endswith(".json")]
    assert re.fullmatch(re.escape(wanted).replace(r"Task_\*", r"Task_\d{8}_\d{6}_\d{6}_[0-9a-f]{8}"), md[0])
    if "*" not in expected:
        assert found["ours"] == found["original"]
    else:
        assert [os.path.dirname(p) for p in found["ours"]] == [os.path.dirname(p) for p in found["original"]]


@pytest.mark.django_db(transaction=True)
def test_every_scenario_reaches_the_dashboard_whole(live_server, token, tmp_path, alice_client):
    """The same scenarios shipped through HttpSink to a live server: every run arrives,
    with as many tool calls as the agent made (no phantom for a failing tool), its status,
    and the tokens and cost the model reported."""
    from history_app import models
    from history_app.agent_history import HttpSink

    sink = HttpSink(
        f"{live_server.url}/api/v1/ingest", TOKEN, flush_interval=0.05, spool_dir=tmp_path / "spool"
    )
    sent = {}
    for scenario in SCENARIOS:
        pair = run_both(scenario, tmp_path / scenario.name, sinks=[sink])
        sent[scenario.name] = (scenario, pair.ours.json["run_id"])
    result = sink.flush(60)
    assert result and result.rejected == 0 and result.spooled == 0
    sink.close()
    for name, (scenario, run_id) in sent.items():
        run = models.Run.objects.get(run_id=run_id)
        assert run.status == scenario.status, name
        assert run.tool_calls.count() == scenario.tool_calls, name
        assert run.framework == "autourgos"
    usage = models.Run.objects.get(run_id=sent["usage_reported"][1])
    assert usage.metrics["input_tokens"] == 300 and usage.metrics["output_tokens"] == 30
    assert usage.metrics["total_cost"] == pytest.approx(0.003)
    assert usage.metrics["provider"] == "openai" and usage.metrics["llm_calls"] == 2
    page = alice_client.get(usage.get_absolute_url()).content.decode()
    assert "300 / 30" in page and "0.003" in page and "openai, as reported" in page
    failing = models.Run.objects.get(run_id=sent["tool_raises"][1])
    (call,) = failing.tool_calls.all()
    assert call.error == "kaboom 1" and call.result == "Error executing 'boom': kaboom 1"
    secrets = models.Run.objects.get(run_id=sent["secrets_everywhere"][1])
    stored = json.dumps(
        [secrets.input, secrets.output, *[c.params_json for c in secrets.tool_calls.all()]]
        + [i.thought for i in secrets.iterations.all()]
    )
    for secret in PLANTED:
        assert secret not in stored, secret
    assert "user-123-session-7" in stored and "4096" in stored  # innocuous values intact
    parse_errors = models.Run.objects.get(run_id=sent["parse_errors_until_failure"][1])
    assert parse_errors.metrics["parse_errors"] == 3
    page = alice_client.get(parse_errors.get_absolute_url()).content.decode()
    assert page.count("parse error</span>") == 3 and "<dt>Parse errors</dt><dd>3</dd>" in page
