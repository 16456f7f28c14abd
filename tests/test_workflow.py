"""Workflow history injection, ported from agno-go's workflow history tests (and its fixes)."""

from __future__ import annotations

import threading
import time

import pytest

from history_app.agent_history import MemoryStore, Step, Workflow


class EchoAgent:
    """Answers with its input; remembers the instructions it saw on each call."""

    def __init__(self, instructions="You are helpful.", name="echo"):
        self.instructions = instructions
        self.name = name
        self.seen: list[str] = []

    def run(self, input):
        self.seen.append(self.instructions)
        return f"echo: {input}"


class FailingAgent(EchoAgent):
    def run(self, input):
        self.seen.append(self.instructions)
        raise RuntimeError("model down")


@pytest.fixture
def store(history_store):
    return history_store


def test_history_reaches_the_system_instructions_and_is_cleared(store):
    agent = EchoAgent()
    wf = Workflow("chat", [Step("chat", agent)], store=store, num_history_runs=5)
    first = wf.run("Hello, my name is Alice", "user-123")
    second = wf.run("What's my name?", "user-123")
    assert first.history_count == 0 and not first.has_history()
    assert agent.seen[0] == "You are helpful."
    assert agent.seen[1] == (
        "You are helpful.\n\n<workflow_history_context>\n[run-1]\ninput: Hello, my name is Alice\n"
        "output: echo: Hello, my name is Alice\n\n</workflow_history_context>"
    )
    assert agent.instructions == "You are helpful."
    assert second.history_count == 1
    assert second.history_input(0) == "Hello, my name is Alice"
    assert second.history_output(-1) == "echo: Hello, my name is Alice"
    assert second.history_input(5) == "" and second.history_output(-9) == ""
    assert second.status == "completed" and second.output == "echo: What's my name?"


def test_empty_instructions_get_just_the_block(store):
    agent = EchoAgent(instructions="")
    wf = Workflow("w", [Step("s", agent)], store=store)
    wf.run("a", "s1")
    wf.run("b", "s1")
    assert agent.seen[1].startswith("<workflow_history_context>")


def test_window_and_numbering(store):
    agent = EchoAgent()
    wf = Workflow("w", [Step("s", agent)], store=store, num_history_runs=2)
    for i in range(4):
        wf.run(f"q{i}", "s1")
    last = agent.seen[-1]
    assert "[run-1]\ninput: q1" in last and "[run-2]\ninput: q2" in last and "q0" not in last


def test_zero_means_all_finished_runs(store):
    agent = EchoAgent()
    wf = Workflow("w", [Step("s", agent)], store=store, num_history_runs=0)
    for i in range(5):
        wf.run(f"q{i}", "s1")
    assert agent.seen[-1].count("[run-") == 4


def test_step_overrides_win_over_the_workflow(store):
    with_history, without, five = EchoAgent(), EchoAgent(), EchoAgent()
    wf = Workflow(
        "w",
        [
            Step("on", with_history),
            Step("off", without, add_history_to_step=False),
            Step("five", five, num_history_runs=5),
        ],
        store=store,
        num_history_runs=1,
    )
    for i in range(6):
        wf.run(f"q{i}", "s1")
    assert with_history.seen[-1].count("[run-") == 1
    assert without.seen[-1] == "You are helpful."
    assert five.seen[-1].count("[run-") == 5  # agno-go ignored the step's value here


def test_step_can_opt_in_when_the_workflow_opts_out(store):
    agent = EchoAgent()
    wf = Workflow("w", [Step("s", agent, add_history_to_step=True)], store=store, add_history_to_steps=False)
    wf.run("a", "s1")
    wf.run("b", "s1")
    assert "[run-1]" in agent.seen[-1]
    disabled = Workflow(
        "w2", [Step("s", EchoAgent(), add_history_to_step=True)], store=store, enable_history=False
    )
    disabled.run("x", "s2")
    assert disabled.run("y", "s2").history_count == 0


def test_sessions_are_isolated(store):
    agent = EchoAgent()
    wf = Workflow("w", [Step("s", agent)], store=store)
    wf.run("order status?", "user-1")
    wf.run("order status?", "user-2")
    assert agent.seen[1] == "You are helpful."


def test_a_failing_step_restores_instructions_and_records_a_failed_run(store):
    agent = FailingAgent()
    wf = Workflow("w", [Step("s", agent)], store=store)
    result = wf.run("boom", "s1")
    assert result.status == "failed" and "model down" in result.error
    assert agent.instructions == "You are helpful."
    second = wf.run("again", "s1")
    assert agent.seen[-1].endswith("[run-1]\ninput: boom\n\n</workflow_history_context>")
    assert second.history_count == 1


def test_steps_chain_outputs_and_injections_are_recorded(store):
    first, second = EchoAgent(), EchoAgent()
    wf = Workflow("w", [Step("research", first), Step("write", second)], store=store)
    wf.run("topic", "s1")
    result = wf.run("next", "s1")
    assert result.output == "echo: echo: next"
    run = result.run
    assert [it.name for it in run.iterations] == ["research", "write"]
    assert [c.step for c in run.injected_contexts] == ["research", "write"]
    context = run.injected_contexts[0]
    assert context.kind == "workflow_history" and context.target == "system"
    assert context.source_run_ids == [store.get_session("s1").runs[0].run_id]
    assert context.text in first.seen[-1]
    assert context.settings == {"num_history_runs": 3}


def test_shared_agent_across_threads_never_sees_another_sessions_history():
    store = MemoryStore()

    class SlowAgent(EchoAgent):
        def run(self, input):
            instructions = self.instructions
            time.sleep(0.001)
            session = input.split(":")[0]
            # Every run in this block must belong to this input's session.
            assert all(
                line.split(": ")[1].startswith(session)
                for line in instructions.splitlines()
                if line.startswith("input: ")
            )
            assert self.instructions == instructions
            return f"{input} done"

    agent = SlowAgent()
    workflows = [Workflow(f"w{i}", [Step("s", agent)], store=store, num_history_runs=3) for i in range(2)]
    errors = []

    def worker(t):
        try:
            for i in range(20):
                result = workflows[t % 2].run(f"s{t}:{i}", f"s{t}")
                assert result.status == "completed", result.error
        except AssertionError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert agent.instructions == "You are helpful."
    assert store.stats()["total_runs"] == 200
    assert all(store.get_session(f"s{t}").count_successful_runs() == 20 for t in range(10))


def test_runs_are_sent_to_sinks():
    sent = []

    class ListSink:
        def send(self, run):
            sent.append(run)

    wf = Workflow("w", [Step("s", EchoAgent())], sinks=[ListSink()])
    result = wf.run("hi", "s1")
    assert [r.run_id for r in sent] == [result.run_id]
