"""The standard run shape that the performance targets are stated against.

One agent run = 5 iterations, each: thought (~500 chars), 2 tool calls (tool name, ~100-char
JSON params, ~600-char result); plus input (~500 chars) and final answer (~600 chars,
light Markdown). 10 runs per session. Deterministic (seeded).

Searchable markers: the common word "workflow" is put in the thought of every other run;
the rare word "zebrafish" in the input of one run in 1,000. One run in 20 is failed (with
an error). With ``contexts=True`` one run in 500 carries a workflow_history injected
context (only used for the 100k page fill, so the inspector page has something to open).

With ``model_calls=True`` (issue #14) each iteration also holds the model call that wrote
its thought, made of the same texts: it received a fixed system prompt, the run's input
and the previous iteration's thought and tool results, and answered the thought (model
gpt-4o-mini, tokens a quarter of the characters, 80-190 ms before the first tool call).
About 21k characters of text a run in all.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

_SYL = [
    "ka",
    "lo",
    "mi",
    "ren",
    "tas",
    "vor",
    "pel",
    "qui",
    "dan",
    "sef",
    "ot",
    "ul",
    "bra",
    "ne",
    "ki",
    "zor",
    "ma",
    "fi",
    "gu",
    "ha",
    "jo",
    "ly",
    "ter",
    "won",
]
_rng0 = random.Random(1)
VOCAB = sorted({"".join(_rng0.choice(_SYL) for _ in range(_rng0.randint(2, 4))) for _ in range(6000)})
VOCAB = [w for w in VOCAB if w not in ("workflow", "zebrafish")]
_rng0.shuffle(VOCAB)
TOOLS = [
    "web_search",
    "fetch_url",
    "sql_query",
    "calculator",
    "read_file",
    "write_file",
    "python_exec",
    "get_weather",
]
AGENTS = ["ResearchBot", "Coder", "Planner", "Support", "Analyst"]
# 100,000 runs one minute apart end on 2026-11-29 (the machine date is 2026-11-30), so
# /stats/?days=30 covers ~43k of them.
BASE = datetime(2026, 9, 21, tzinfo=UTC)


def _text(rng: random.Random, n: int) -> str:
    words = []
    size = 0
    while size < n:
        # Zipf-ish: cube of a uniform picks low indices more often.
        w = VOCAB[int(len(VOCAB) * rng.random() ** 3)]
        words.append(w)
        size += len(w) + 1
    return " ".join(words)[:n]


SYSTEM_PROMPT = (
    "You are a careful research agent. Think step by step, call one or two tools per step, "
    "and answer in Markdown once the observations settle the question. Never invent facts."
)


def _model_calls(i: int, run: dict) -> None:
    """Each iteration's model call, from the run's own texts (a separate seed: the texts of
    the run stay those of the standard shape)."""
    rng = random.Random(i * 104729 + 7)
    previous: list[dict] = []
    for it in run["iterations"]:
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT, "part": "instructions"},
            {"role": "user", "content": run["input"], "part": "input"},
            *previous,
        ]
        start = datetime.fromisoformat(it["started_at"])
        it["model_calls"] = [
            {
                "model": "gpt-4o-mini",
                "provider": "openai",
                "messages": messages,
                "output": it["thought"],
                "finish_reason": "tool_calls",
                "input_tokens": sum(len(m["content"]) for m in messages) // 4,
                "output_tokens": len(it["thought"]) // 4,
                "started_at": it["started_at"],
                "ended_at": (start + timedelta(milliseconds=rng.randint(80, 190))).isoformat(),
            }
        ]
        previous = [
            {"role": "assistant", "content": it["thought"], "part": "run"},
            *({"role": "tool", "content": c["result"], "part": "run"} for c in it["tool_calls"]),
        ]


def run_dict(i: int, *, contexts: bool = False, t0: datetime = BASE, model_calls: bool = False) -> dict:
    """Run number ``i`` (0-based) of the shape, as a native agent-history/v1 record."""
    rng = random.Random(i * 7919 + 13)
    session = i // 10
    start = t0 + timedelta(seconds=60 * i)
    t = start
    iterations = []
    for k in range(5):
        it_start = t
        thought = _text(rng, 500)
        if k == 0 and i % 2 == 0:
            thought = "workflow " + thought[:491]
        calls = []
        for c in range(2):
            tool = TOOLS[rng.randrange(len(TOOLS))]
            params = {"query": _text(rng, 60), "max_results": rng.randint(1, 10), "lang": "en"}
            cs = t + timedelta(milliseconds=200)
            ce = cs + timedelta(milliseconds=rng.randint(50, 900))
            t = ce
            calls.append(
                {
                    "tool": tool,
                    "call_id": f"c{k}{c}",
                    "params": params,
                    "result": _text(rng, 600),
                    "started_at": cs.isoformat(),
                    "ended_at": ce.isoformat(),
                }
            )
        t += timedelta(milliseconds=300)
        iterations.append(
            {
                "index": k + 1,
                "thought": thought,
                "tool_calls": calls,
                "started_at": it_start.isoformat(),
                "ended_at": t.isoformat(),
            }
        )
    failed = i % 20 == 7
    inp = _text(rng, 500)
    if i % 1000 == 500:
        inp = "zebrafish " + inp[:490]
    out = (
        "## Answer\n\n"
        + _text(rng, 200)
        + "\n\n- **"
        + _text(rng, 30)
        + "**: "
        + _text(rng, 150)
        + "\n- "
        + _text(rng, 150)
        + "\n\n`"
        + _text(rng, 20)
        + "`"
    )[:600]
    run = {
        "schema": "agent-history/v1",
        "run_id": f"run-{i:07d}",
        "session_id": f"sess-{session:06d}",
        "kind": "agent",
        "status": "failed" if failed else "completed",
        "agent_name": AGENTS[session % len(AGENTS)],
        "user_id": f"user-{session % 50}",
        "framework": "autourgos",
        "input": inp,
        "output": None if failed else out,
        "error": f"ToolError: {_text(rng, 80)}" if failed else None,
        "started_at": start.isoformat(),
        "ended_at": t.isoformat(),
        "iterations": iterations,
        "metrics": {"input_tokens": rng.randint(1000, 9000), "output_tokens": rng.randint(100, 900)},
    }
    if model_calls:
        _model_calls(i, run)
    if contexts and i % 500 == 499 and i % 10 != 0:
        # History of the earlier runs of the same session, in render_workflow_history's layout.
        entries = [run_dict(j) for j in range(session * 10, i)]
        from history_app.agent_history import render_workflow_history

        text = render_workflow_history(
            [
                {"input": e["input"], "output": e["output"] or ""}
                for e in entries
                if e["status"] == "completed"
            ]
        )
        run["injected_contexts"] = [
            {
                "kind": "workflow_history",
                "target": "system",
                "text": text,
                "step": "chat",
                "settings": {"num_history_runs": 0},
                "source_run_ids": [e["run_id"] for e in entries if e["status"] == "completed"],
            }
        ]
        run["kind"] = "workflow"
    return run


def text_chars(run: dict) -> int:
    n = len(run["input"]) + len(run["output"] or "") + len(run["error"] or "")
    for it in run["iterations"]:
        n += len(it["thought"])
        for c in it["tool_calls"]:
            n += len(c["tool"]) + len(json.dumps(c["params"])) + len(c["result"])
        for call in it.get("model_calls", ()):
            n += sum(len(m["content"]) for m in call["messages"]) + len(call["output"] or "")
    return n


if __name__ == "__main__":
    r = run_dict(0)
    print("text chars:", text_chars(r), "JSON bytes:", len(json.dumps(r)))
    print("params json chars:", len(json.dumps(r["iterations"][0]["tool_calls"][0]["params"])))
    print(r["output"])
