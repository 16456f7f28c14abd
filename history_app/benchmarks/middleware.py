"""The recording middleware's cost on the agent's thread, against no middleware at all.

    python -m history_app.benchmarks.middleware [RUNS] [ROUNDS]

Runs the real ``autourgos-agent`` (a test dependency: ``pip install -e ".[test]"``) with its
scripted fake model, a run of 6 model turns and 10 tool calls, in one loop: no middleware,
ours (its default files on), and autourgos-history 2.2.9 where installed, interleaved
round by round so drift hits all alike. Prints the median time of ``agent.invoke`` per run
(the agent's thread), the middleware's share of it (minus the no-middleware loop of the
same round), and the time ``flush()`` then takes to finish the files off the thread.
Target (issue #13): ≤ 0.5 ms per run on the agent's thread.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


def _turns() -> list[str]:
    """6 model turns: 5 of 2 tool calls each (10), then the answer; texts of the standard
    shape's sizes (a 500-character thought, ~100-character parameters)."""
    thought = ("I will look this up and compare the figures before answering. " * 8)[:500]
    turns = []
    for k in range(5):
        actions = [
            {
                "action": "web_search",
                "action_input": {"query": f"tokyo population {k} " * 4, "max_results": 5},
            },
            {"action": "calculator", "action_input": {"expression": f"{k} * 37.4 / 19.1"}},
        ]
        turns.append(json.dumps({"thought": thought, "actions": actions}))
    turns.append(
        json.dumps({"thought": "done", "actions": [], "final_answer": "Tokyo is about 1.96x Osaka." * 20})
    )
    return turns


TOOLS = [
    {
        "name": "web_search",
        "description": "search",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        "func": lambda query="", max_results=5: ("result text about the query " * 22)[:600],
    },
    {
        "name": "calculator",
        "description": "math",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        "func": lambda expression="": "1.96",
    },
]


def _loop(make_middleware: Callable[[], list[Any]], runs: int, *, hold: bool) -> tuple[float, float, float]:
    """Median wall time and median CPU time of the agent's thread per run, and the time
    ``flush()`` takes per run afterwards. With ``hold``, our writer thread waits until the
    loop is over (so the flush is the whole of its work, and the agent's thread measures
    the callbacks alone)."""
    import threading

    from autourgos_agent import Agent
    from autourgos_agent.testing import ScriptedFakeLLM

    middleware = make_middleware()
    release = threading.Event()
    if hold:
        for handler in middleware:
            if hasattr(handler, "_writer"):
                handler._writer.submit(release.wait)
    walls, cpus = [], []
    for _ in range(runs):
        agent = Agent(llm=ScriptedFakeLLM(_turns()), middleware=list(middleware), max_iterations=10)
        agent.add_tools(*TOOLS)
        wall, cpu = time.perf_counter(), time.thread_time()
        agent.invoke("How much bigger is Tokyo than Osaka?")
        cpus.append(time.thread_time() - cpu)
        walls.append(time.perf_counter() - wall)
    release.set()
    started = time.perf_counter()
    for handler in middleware:
        handler.flush()
    return statistics.median(walls), statistics.median(cpus), (time.perf_counter() - started) / runs


def callbacks_alone(make_middleware: Callable[[], Any], runs: int) -> tuple[float, float]:
    """CPU time per run of the middleware's own callbacks, fired directly in the order the
    agent fires them (no agent, no dispatch), with its writer held; then the writer's
    time per run for the backlog."""
    import threading
    from types import SimpleNamespace

    middleware = make_middleware()
    release = threading.Event()
    if hasattr(middleware, "_writer"):
        middleware._writer.submit(release.wait)
    agent = SimpleNamespace(name="Agent")
    turns = _turns()
    calls = [json.loads(turn)["actions"] for turn in turns]
    started = time.thread_time()
    for _ in range(runs):
        middleware.on_agent_start("How much bigger is Tokyo than Osaka?", agent=agent)
        for number, (turn, actions) in enumerate(zip(turns, calls, strict=True), start=1):
            middleware.on_iteration_start(number, agent=agent)
            middleware.on_llm_end(turn, agent=agent, raw=turn)
            for action in actions:
                middleware.on_tool_start(action["action"], action["action_input"], agent=agent)
            for action in actions:
                middleware.on_tool_end(action["action"], "result text " * 50, agent=agent)
        middleware.on_agent_end("Tokyo is about 1.96x Osaka.", agent=agent)
    callbacks = (time.thread_time() - started) / runs
    release.set()
    started = time.perf_counter()
    middleware.flush()
    return callbacks, (time.perf_counter() - started) / runs


def main(runs: int = 200, rounds: int = 5) -> None:
    from history_app.agent_history import AgentHistoryMiddleware

    try:
        from autourgos_history import AgentHistoryMiddleware as Original
    except ImportError:  # not installed: ours against none only
        Original = None

    folder = tempfile.mkdtemp(prefix="middleware-bench-")
    loops: dict[str, Callable[[], list[Any]]] = {
        "none": lambda: [],
        "ours": lambda: [AgentHistoryMiddleware(folder=f"{folder}/ours")],
    }
    if Original is not None:
        loops["autourgos-history 2.2.9"] = lambda: [Original(folder=f"{folder}/original")]
    figures: dict[str, dict[str, list[float]]] = {
        name: {"wall": [], "cpu": [], "held_cpu": [], "flush": [], "held_flush": []} for name in loops
    }
    for _ in range(rounds):
        for name, make in loops.items():
            wall, cpu, flushed = _loop(make, runs, hold=False)
            _, held_cpu, held_flush = _loop(make, runs, hold=True)
            for key, value in (
                ("wall", wall),
                ("cpu", cpu),
                ("held_cpu", held_cpu),
                ("flush", flushed),
                ("held_flush", held_flush),
            ):
                figures[name][key].append(value)

    def ms(name: str, key: str) -> float:
        return statistics.median(figures[name][key]) * 1000

    print(f"agent runs of 6 model turns and 10 tool calls, {runs} runs x {rounds} rounds (medians)")
    print(f"  {'':26} {'agent thread CPU':>17} {'(writer held)':>14} {'wall':>9} {'writer':>9}")
    for name in loops:
        print(
            f"  {name:26} {ms(name, 'cpu'):14.3f} ms {ms(name, 'held_cpu'):11.3f} ms {ms(name, 'wall'):6.3f} ms "
            f"{ms(name, 'held_flush'):6.3f} ms"
        )
    for name, make in loops.items():
        if name != "none":
            alone = [callbacks_alone(lambda make=make: make()[0], runs) for _ in range(rounds)]
            own = statistics.median(a for a, _ in alone) * 1000
            writer = statistics.median(w for _, w in alone) * 1000
            print(
                f"  {name}: its callbacks alone {own:.3f} ms CPU per run; its writer then {writer:.3f} ms per run"
            )
    for name in loops:
        if name != "none":
            print(
                f"  {name}: {ms(name, 'held_cpu') - ms('none', 'held_cpu'):+.3f} ms per run on the agent's thread "
                f"(its callbacks and the agent's dispatch to them); {ms(name, 'wall') - ms('none', 'wall'):+.3f} ms of wall time with its writer "
                "running beside a model that answers at once (the writer's work, done while a real model is "
                "awaited, competes for the GIL here)"
            )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
