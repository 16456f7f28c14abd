"""AgentHistoryMiddleware replays each real autourgos scenario and writes the same files."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from types import SimpleNamespace

import pytest

from history_app.agent_history import AgentHistoryMiddleware, parse, record_injection
from history_app.agent_history.formats import autourgos

from .conftest import autourgos_logs, load_jsonl, manifest

QUERY_LENGTH = re.compile(r"\[REDACTED: length=(\d+)\]")


def replay(path, tmp_path):
    """Drive the middleware with the callbacks autourgos fired for a real log."""
    entry = manifest()[path.name]
    data = json.loads(path.read_text())
    md_run = autourgos.parse_markdown(path.with_suffix(".md").read_text())[0]
    flags = {k: v for k, v in entry["middleware_flags"].items() if k.startswith("include_")}
    mw = AgentHistoryMiddleware(
        folder=str(tmp_path), file_path=entry["middleware_flags"]["file_path"] and path.name, **flags
    )
    agent = SimpleNamespace(name=data["agent_name"])
    hidden = QUERY_LENGTH.fullmatch(data["query"] or "")
    mw.on_agent_start("q" * int(hidden.group(1)) if hidden else data["query"], agent=agent)
    for position, iteration in enumerate(data["iterations"]):
        mw.on_iteration_start(iteration["iteration"], agent=agent)
        thought = iteration["thought"]
        mw.on_llm_end(
            None
            if thought is None
            else thought
            if isinstance(thought, str)
            else json.dumps({"thought": thought}),
            agent=agent,
        )
        tools = iteration["tools"]
        if tools == "[REDACTED]":  # the JSON withheld them; the Markdown names them
            tools = [{"tool": c.tool, "params": c.params} for c in md_run.iterations[position].tool_calls]
        observations = iteration["observations"]
        if observations == "[REDACTED]":
            observations = [
                {"tool": c.tool, "result": c.result} for c in md_run.iterations[position].tool_calls
            ]
        for tool in tools:
            mw.on_tool_start(tool["tool"], tool["params"], agent=agent)
        for observation in observations:
            mw.on_tool_end(observation["tool"], observation["result"], agent=agent)
    if data["error"]:
        mw.on_agent_error(data["error"], agent=agent)
    else:
        mw.on_agent_end(data["final_response"] if flags["include_final"] else "hidden", agent=agent)
    assert mw.flush(10)  # the files are written off the agent's thread, as autourgos-history does
    return mw, data


SECRETS_SCENARIO = "Task_20261129_224355_630165_f0f3ce5c.json"


@pytest.mark.parametrize("path", autourgos_logs(), ids=lambda p: manifest()[p.name]["scenario"])
def test_files_match_the_real_package_field_for_field(path, tmp_path):
    mw, real = replay(path, tmp_path)
    md_path, json_path = mw.last_files
    if manifest()[path.name]["middleware_flags"]["file_path"]:
        assert (md_path.name, json_path.name) == ("named_run_custom.md", "named_run_custom.json")
    else:
        assert re.fullmatch(r"Task_\d{8}_\d{6}_\d{6}_[0-9a-f]{8}\.json", json_path.name)
    ours = json.loads(json_path.read_text())
    # Our additions: ids, and the contexts injected during the run.
    assert ours.pop("run_id") and ours.pop("session_id") and ours.pop("injected_contexts") == []
    for key in ("start_time", "end_time"):
        assert ours.pop(key) and real.pop(key)
    if path.name == SECRETS_SCENARIO:
        # Deliberately better redaction: structure equal, every planted secret gone.
        assert [len(i["tools"]) for i in ours["iterations"]] == [len(i["tools"]) for i in real["iterations"]]
        for fake in (
            "FAKEinUrl123",
            "FAKE51HxEXAMPLE0000",
            "FAKE-EXAMPLE-0000",
            "FAKEhunter2",
            "plainFAKE123",
            "FAKE-pw-123",
            "FAKE-not-shaped",
        ):
            assert fake not in json_path.read_text() and fake not in md_path.read_text()
        return
    assert ours == real
    # The same parser reads our files and the real package's, with the same result.
    assert parse(ours)[0].iterations == parse(real)[0].iterations
    real_md = path.with_suffix(".md").read_text()
    started = re.compile(r"\*\*Started At:\*\* .*")
    assert started.sub("", md_path.read_text()) == started.sub("", real_md)


def test_tool_errors_from_worker_threads_are_kept(tmp_path):
    mw = AgentHistoryMiddleware(folder=str(tmp_path), include_query=True)
    agent = SimpleNamespace(name="Agent")
    mw.on_agent_start("read it", agent=agent)
    mw.on_iteration_start(1, agent=agent)
    mw.on_tool_start("read_file", {"path": "x"}, agent=agent)
    # autourgos runs tools on a worker thread whose context holds no run state.
    worker = threading.Thread(
        target=mw.on_tool_error, args=("read_file", FileNotFoundError("x")), kwargs={"agent": agent}
    )
    worker.start()
    worker.join()
    mw.on_agent_end("could not read", agent=agent)
    mw.flush()
    data = json.loads(mw.last_files[1].read_text())
    # Written as autourgos-history writes on_tool_error ("Error: …"), which drops it here.
    assert data["iterations"][0]["observations"] == [{"tool": "read_file", "result": "Error: x"}]
    assert parse(data)[0].iterations[0].tool_calls[0].error == "Error: x"


def test_concurrent_asyncio_runs_never_mix(tmp_path):
    mw = AgentHistoryMiddleware(folder=str(tmp_path), include_query=True)

    async def one_run(n):
        agent = SimpleNamespace(name=f"agent-{n}")
        mw.on_agent_start(f"question {n}", agent=agent)
        for i in range(3):
            mw.on_iteration_start(i + 1)
            await asyncio.sleep(0)
            mw.on_llm_end(json.dumps({"thought": f"thinking {n}.{i}"}))
            mw.on_tool_start("t", {"n": n})
            await asyncio.sleep(0)
            mw.on_tool_end("t", f"result {n}")
        mw.on_agent_end(f"answer {n}")
        return mw.last_files

    async def main():
        # A synchronous run first: its state must not leak into the tasks.
        mw.on_agent_start("sync run", agent=None)
        mw.on_agent_end("sync answer")
        return await asyncio.gather(*(one_run(n) for n in range(5)))

    asyncio.run(main())
    mw.flush()
    logs = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert len(logs) == 6
    for log in logs:
        if log["query"] == "sync run":
            assert log["iterations"] == []
            continue
        n = log["query"].split()[-1]
        assert log["final_response"] == f"answer {n}"
        assert [it["thought"] for it in log["iterations"]] == [f"thinking {n}.{i}" for i in range(3)]
        assert all(obs["result"] == f"result {n}" for it in log["iterations"] for obs in it["observations"])


def test_thought_rules(tmp_path):
    mw = AgentHistoryMiddleware(folder=str(tmp_path))
    mw.on_agent_start("q")
    for i, response in enumerate(
        [
            '```json\n{"thought": ["a", "b"]}\n```',
            "plain text",
            '{"thought": null, "final_answer": "x"}',
            None,
        ]
    ):
        mw.on_iteration_start(i + 1)
        mw.on_llm_end(response)
    mw.on_agent_end("done")
    mw.flush()
    thoughts = [it["thought"] for it in json.loads(mw.last_files[1].read_text())["iterations"]]
    assert thoughts == [["a", "b"], "plain text", '{"thought": null, "final_answer": "x"}', None]


def test_injections_during_a_run_are_recorded_and_written(tmp_path):
    mw = AgentHistoryMiddleware(folder=str(tmp_path))
    mw.on_agent_start("q")
    record_injection(
        "<workflow_history_context>\n…</workflow_history_context>", kind="workflow_history", step="plan"
    )
    mw.on_agent_end("done")
    mw.flush()
    contexts = json.loads(mw.last_files[1].read_text())["injected_contexts"]
    assert contexts[0]["kind"] == "workflow_history" and contexts[0]["step"] == "plan"
    assert parse(json.loads(mw.last_files[1].read_text()))[0].injected_contexts[0].step == "plan"


def test_secrets_never_reach_the_files(tmp_path):
    mw = AgentHistoryMiddleware(folder=str(tmp_path), include_query=True)
    for entry in load_jsonl("secrets.jsonl"):
        for placement in entry["placements"]:
            mw.on_agent_start(placement.get("text") or "q")
            mw.on_iteration_start(1)
            mw.on_tool_start("fetch", placement.get("params") or {})
            mw.on_tool_end("fetch", placement.get("text") or "ok")
            mw.on_agent_end(entry["secret"])
            mw.flush()
            for path in mw.last_files:
                assert entry["secret"] not in path.read_text()
                assert json.dumps(entry["secret"])[1:-1] not in path.read_text()


def test_runs_go_to_sinks_redacted(tmp_path):
    sent = []
    mw = AgentHistoryMiddleware(
        folder=str(tmp_path), sinks=[SimpleNamespace(send=sent.append, flush=lambda t: True)]
    )
    mw.on_agent_start("use sk-proj-" + "a" * 40)
    mw.on_agent_end("x" * 2000)
    assert mw.flush(5) is True
    assert sent[0].status == "completed"
    assert "sk-proj-" not in sent[0].input
    assert len(sent[0].output) == 2000  # the files' 512-character cut is not the dashboard's
    assert mw.flush(1) is True


# -- the files are written off the agent's thread -----------------------------------------


def test_callbacks_never_wait_for_the_files(tmp_path):
    """With the writer held up, a whole run's callbacks still return at once; the files
    appear, complete, when it goes on."""
    mw = AgentHistoryMiddleware(folder=str(tmp_path), include_query=True)
    held = threading.Event()
    mw._writer.submit(held.wait)
    mw.on_agent_start("q")
    for i in range(3):
        mw.on_iteration_start(i + 1)
        mw.on_llm_end(json.dumps({"thought": f"t{i}"}))
        mw.on_tool_start("echo", {"i": i})
        mw.on_tool_end("echo", f"r{i}")
    mw.on_agent_end("done")
    md_path, json_path = mw.last_files
    assert not json_path.exists() and not md_path.exists()  # nothing written on this thread
    held.set()
    assert mw.flush(10)
    data = json.loads(json_path.read_text())
    assert [it["thought"] for it in data["iterations"]] == ["t0", "t1", "t2"]
    assert md_path.read_text().count("## Iteration") == 3 and '"done"' in md_path.read_text()


def test_a_writer_that_raises_loses_nothing_else(tmp_path, monkeypatch):
    """An iteration's section that cannot be written is logged; the other sections, the
    JSON file and the sinks still get everything."""
    sent = []
    mw = AgentHistoryMiddleware(folder=str(tmp_path), sinks=[SimpleNamespace(send=sent.append)])
    real = autourgos.markdown_iteration

    def broken(iteration, **options):
        if iteration.index == 2:
            raise OSError("disk full")
        return real(iteration, **options)

    monkeypatch.setattr(autourgos, "markdown_iteration", broken)
    mw.on_agent_start("q")
    for i in range(3):
        mw.on_iteration_start(i + 1)
        mw.on_llm_end(json.dumps({"thought": f"t{i}"}))
    mw.on_agent_end("done")
    assert mw.flush(10)
    md_path, json_path = mw.last_files
    assert "## Iteration 1" in md_path.read_text() and "## Iteration 3" in md_path.read_text()
    assert len(json.loads(json_path.read_text())["iterations"]) == 3
    assert [it.thought for it in sent[0].iterations] == ["t0", "t1", "t2"]


def test_files_are_complete_when_the_program_exits_without_flush(tmp_path):
    """A script that records a run and exits at once: the writer is flushed at exit."""
    import subprocess
    import sys

    script = (
        "from history_app.agent_history import AgentHistoryMiddleware\n"
        f"mw = AgentHistoryMiddleware(folder={str(tmp_path)!r})\n"
        "mw.on_agent_start('q')\n"
        "for i in range(50):\n"
        "    mw.on_iteration_start(i + 1)\n"
        "    mw.on_tool_start('echo', {'i': i})\n"
        "    mw.on_tool_end('echo', 'x' * 5000)\n"
        "mw.on_agent_end('the end')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    (json_path,) = tmp_path.glob("*.json")
    (md_path,) = tmp_path.glob("*.md")
    assert len(json.loads(json_path.read_text())["iterations"]) == 50
    assert md_path.read_text().endswith('## Final Answer\n"the end"\n')


def test_a_sink_that_raises_or_hangs_keeps_nothing_from_the_others(tmp_path):
    """A sink that raises: the next sink still gets the run. A sink that never returns:
    the files of every later run are still written (sinks have their own thread)."""
    got = []

    class Raising:
        def send(self, run):
            raise RuntimeError("down")

    stuck = threading.Event()
    mw = AgentHistoryMiddleware(
        folder=str(tmp_path / "a"), sinks=[Raising(), SimpleNamespace(send=got.append)]
    )
    mw.on_agent_start("q")
    mw.on_agent_end("done")
    assert mw.flush(10) and [r.output for r in got] == ["done"]

    hanging = AgentHistoryMiddleware(
        folder=str(tmp_path / "b"), sinks=[SimpleNamespace(send=lambda r: stuck.wait())]
    )
    for n in range(3):
        hanging.on_agent_start(f"q{n}")
        hanging.on_agent_end(f"answer {n}")
    assert hanging._writer.flush(10)  # the files do not wait for the sink
    assert len(list((tmp_path / "b").glob("*.json"))) == 3
    assert hanging.flush(0.2) is False  # the sink has not taken them: flush says so
    stuck.set()
    assert hanging.flush(10)


def test_flush_waits_for_what_was_asked_before_it_not_for_an_empty_queue(tmp_path):
    """Runs keep coming while flush waits: it returns once the ones before it are done."""
    mw = AgentHistoryMiddleware(folder=str(tmp_path))
    stop = threading.Event()

    def produce():
        n = 0
        while not stop.is_set():
            mw._writer.submit(time.sleep, 0.005)
            n += 1
            time.sleep(0.002)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        time.sleep(0.2)
        assert mw.flush(10)
    finally:
        stop.set()
        producer.join()


def test_a_task_raising_systemexit_does_not_stop_the_writer(tmp_path):
    mw = AgentHistoryMiddleware(folder=str(tmp_path))

    def leave():
        raise SystemExit(3)

    mw._writer.submit(leave)
    mw.on_agent_start("q")
    mw.on_agent_end("done")
    assert mw.flush(10)
    assert json.loads(mw.last_files[1].read_text())["final_response"] == "done"
