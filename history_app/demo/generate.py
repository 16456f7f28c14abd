"""The demo ``quickstart`` loads (issue #17): the sample files in this folder, real output of
autourgos-history and agno, and a generated month of runs in the native format, all placed
in the four weeks before the minute the demo is first loaded (its *anchor*), with one run
still running at that minute so live mode has something to show.

Every run id is fixed and every random choice comes from a fixed seed: only the times
depend on the anchor. A later load reads the anchor back from a demo run already stored
(``anchor_for``), builds the very same records, and ingestion finds each of them a
duplicate. The sample files themselves are left as they were written; their copies are
moved in memory.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from history_app.agent_history.formats import autourgos

DEMO_DIR = Path(__file__).resolve().parent
SEED = 17
# Any fixed minute: the demo is built around it once to learn each native run's offset
# from the anchor, which is how a stored run gives the anchor back.
REFERENCE_ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)
# Sessions start 1 to DAYS days (and up to half a day more) before the anchor: inside the
# stats page's default window of 30 days.
DAYS = 27
# How long before the anchor the team and the workflow sample sessions start.
TEAM_BEFORE = timedelta(days=9, hours=5)
WORKFLOW_BEFORE = timedelta(days=2, hours=3, minutes=20)


@dataclass(frozen=True)
class Step:
    """One iteration in which the model asks for one tool."""

    thought: str
    tool: str
    params: dict[str, Any]
    result: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Task:
    input: str
    steps: tuple[Step, ...]
    output: str


@dataclass(frozen=True)
class Agent:
    name: str
    slug: str
    model: str
    provider: str
    instructions: str
    tasks: tuple[Task, ...]
    failures: tuple[str, ...]
    # Seconds a tool call takes, low and high.
    tool_seconds: tuple[float, float] = (0.05, 1.5)


AGENTS = (
    Agent(
        name="Support triage",
        slug="triage",
        model="gpt-4o-mini",
        provider="openai",
        instructions=(
            "You triage support tickets for Acme Cloud. Classify each ticket (category and "
            "priority), look up what you need, and draft a reply for a person to send."
        ),
        tasks=(
            Task(
                "Ticket #4812: I was charged twice for my March invoice (INV-20931). Please refund one.",
                (
                    Step(
                        "Check the invoice first.",
                        "lookup_invoice",
                        {"invoice": "INV-2093"},
                        error="Error: no invoice INV-2093",
                    ),
                    Step(
                        "I dropped a digit; try the id as written.",
                        "lookup_invoice",
                        {"invoice": "INV-20931"},
                        "INV-20931: $49.00, paid twice (ch_3P1 and ch_3P2, 2 March)",
                    ),
                    Step(
                        "Find the refund procedure.",
                        "search_kb",
                        {"query": "duplicate charge refund"},
                        "KB-118 Refunding a duplicate charge: refund the later charge from Billing > Payments.",
                    ),
                ),
                "Category: billing, duplicate charge (priority: normal).\n\nDraft reply: Sorry about "
                "that: INV-20931 was charged twice. The second charge ($49.00) is refunded and will be "
                "back on your card in 5 to 10 business days.",
            ),
            Task(
                "Ticket #4830: the dashboard shows 'Error 502' since this morning for our EU workspace.",
                (
                    Step(
                        "A 502 for one region: check the status of eu-west-1.",
                        "check_status",
                        {"region": "eu-west-1"},
                        "eu-west-1: degraded (load balancer), incident INC-771 opened 07:42 UTC",
                    ),
                ),
                "Category: outage (priority: high), linked to INC-771.\n\nDraft reply: We are aware of "
                "errors in the EU region and are working on it; follow INC-771 on the status page.",
            ),
            Task(
                "Ticket #4857: How do I add a teammate who should only see billing?",
                (
                    Step(
                        "Look up the roles.",
                        "search_kb",
                        {"query": "billing-only role"},
                        "KB-42 Roles: Owner, Admin, Member, Billing (invoices and payment methods only).",
                    ),
                ),
                "Category: how-to (priority: low).\n\nDraft reply: Invite them from Settings > Members "
                "and choose the Billing role: they will see invoices and payment methods, nothing else.",
            ),
            Task(
                "Ticket #4861: Please delete all data for our account, we're leaving.",
                (
                    Step(
                        "Identify the account and who asked.",
                        "lookup_customer",
                        {"ticket": 4861},
                        "Northwind Ltd, plan Team, 14 seats, requester is the verified account owner",
                    ),
                ),
                "Category: account closure (priority: normal, needs a person).\n\nDraft reply: We have "
                "your request. Deletion is permanent, so a colleague will confirm it with you by email "
                "before anything is removed.",
            ),
        ),
        failures=(
            "RateLimitError: Error code: 429 - Rate limit reached for gpt-4o-mini on tokens per min (TPM).",
            "APITimeoutError: Request timed out.",
        ),
    ),
    Agent(
        name="Code reviewer",
        slug="review",
        model="claude-sonnet-4",
        provider="anthropic",
        instructions=(
            "You review pull requests. Read the diff, run the tests that cover it, and say "
            "approve or request changes, with the reasons a maintainer needs."
        ),
        tasks=(
            Task(
                "Review PR #412: add retry with backoff to the webhook sender",
                (
                    Step(
                        "Read the change.",
                        "fetch_diff",
                        {"pr": 412},
                        "+38 -6 in webhooks/sender.py, tests/test_sender.py",
                    ),
                    Step(
                        "Run the sender's tests.",
                        "run_tests",
                        {"path": "tests/test_sender.py"},
                        "14 passed in 2.31s",
                    ),
                ),
                "Approve once capped. The backoff grows without bound after 10 attempts: cap it "
                "(60 s) and add jitter so that retries from many senders do not line up.",
            ),
            Task(
                "Review PR #415: move user settings to a JSONField",
                (
                    Step(
                        "Read the change.",
                        "fetch_diff",
                        {"pr": 415},
                        "+120 -84 in accounts/models.py, accounts/migrations/0031_settings_json.py",
                    ),
                    Step(
                        "A migration: run the app's tests.",
                        "run_tests",
                        {"path": "accounts"},
                        error="exit status 1: 2 failed, 61 passed (test_settings_default, test_settings_roundtrip)",
                    ),
                    Step(
                        "Two failures; read the migration.",
                        "read_file",
                        {"path": "accounts/migrations/0031_settings_json.py"},
                        "RunPython(forwards) with no reverse_code; field default={}",
                    ),
                ),
                "Request changes: `default={}` shares one dict between all rows (use `default=dict`), "
                "which is what the two failing tests catch, and the data migration has no reverse "
                "function, so it cannot be rolled back.",
            ),
            Task(
                "Review PR #419: bump Django to 5.2.8",
                (
                    Step("Read the change.", "fetch_diff", {"pr": 419}, "+1 -1 in requirements.txt"),
                    Step(
                        "Run the whole suite.", "run_tests", {"path": "."}, "812 passed, 3 skipped in 48.0s"
                    ),
                ),
                "Approve: a patch release with security fixes, and the full suite passes.",
            ),
        ),
        failures=(
            "APIStatusError: Error code: 529 - overloaded_error: Overloaded",
            "APIConnectionError: Connection error.",
        ),
        tool_seconds=(0.3, 12.0),
    ),
    Agent(
        name="SQL analyst",
        slug="sql",
        model="gpt-4o",
        provider="openai",
        instructions=(
            "You answer questions about the product's data by writing read-only SQL for "
            "PostgreSQL. Show the figures you used and say what they mean."
        ),
        tasks=(
            Task(
                "How many signups did we get per week over the last two months?",
                (
                    Step(
                        "See which tables exist.",
                        "list_tables",
                        {},
                        "users, signups, orders, refunds, events",
                    ),
                    Step(
                        "Count signups by week.",
                        "run_sql",
                        {
                            "sql": "SELECT date_trunc('week', created_at) AS week, count(*) FROM signups "
                            "WHERE created_at > now() - interval '2 months' GROUP BY 1 ORDER BY 1"
                        },
                        "9 rows: 412, 398, 455, 501, 478, 530, 562, 547, 590",
                    ),
                ),
                "Signups grew from about 410 to 590 a week (+43 %) over nine weeks, with a dip in "
                "week 2 and the strongest week last.",
            ),
            Task(
                "Which five customers placed the most orders last month?",
                (
                    Step(
                        "Group last month's orders by customer.",
                        "run_sql",
                        {"sql": "SELECT customer_id, count(*) FROM order GROUP BY 1 ORDER BY 2 DESC LIMIT 5"},
                        error='syntax error at or near "order"',
                    ),
                    Step(
                        "The table is `orders`; also limit to last month.",
                        "run_sql",
                        {
                            "sql": "SELECT c.name, count(*) FROM orders o JOIN customers c ON c.id = o.customer_id "
                            "WHERE o.created_at >= date_trunc('month', now()) - interval '1 month' "
                            "AND o.created_at < date_trunc('month', now()) GROUP BY 1 ORDER BY 2 DESC LIMIT 5"
                        },
                        "Northwind 214, Globex 187, Initech 152, Umbrella 131, Hooli 97",
                    ),
                ),
                "| Customer | Orders |\n|---|---|\n| Northwind | 214 |\n| Globex | 187 |\n| Initech | 152 |\n"
                "| Umbrella | 131 |\n| Hooli | 97 |\n\nThe top five placed 781 orders, 38 % of the month's.",
            ),
            Task(
                "What is our refund rate by plan?",
                (
                    Step(
                        "Refunds over orders, per plan.",
                        "run_sql",
                        {
                            "sql": "SELECT plan, round(100.0 * count(r.id) / count(o.id), 1) FROM orders o "
                            "LEFT JOIN refunds r ON r.order_id = o.id GROUP BY plan"
                        },
                        "Free 0.0, Team 1.8, Business 0.9",
                    ),
                ),
                "Team refunds 1.8 % of orders, twice Business (0.9 %); Free has no paid orders to refund.",
            ),
        ),
        failures=(
            "InternalServerError: Error code: 500 - The server had an error while processing your request.",
        ),
        tool_seconds=(0.2, 6.0),
    ),
    Agent(
        # A local model: the price list knows no price for it, and the pages say so.
        name="Meeting notes",
        slug="notes",
        model="llama3.1:8b",
        provider="ollama",
        instructions="You turn raw meeting notes into a short summary and action items with owners.",
        tasks=(
            Task(
                "Summarise the notes from Monday's planning meeting.",
                (),
                "- Ship the EU status page before Friday.\n- Move the billing migration to next sprint.\n"
                "- Hiring: two interviews this week for the platform role.",
            ),
            Task(
                "Turn these notes into action items with owners.",
                (),
                "1. Grace: publish the EU status page (Fri).\n2. Linus: draft the billing migration "
                "plan (next Tue).\n3. Ada: schedule the two platform interviews (Wed).",
            ),
        ),
        failures=("ConnectError: could not reach the Ollama server at 127.0.0.1:11434",),
    ),
)
# How often each agent works: the local model least, so most of the cost is known.
AGENT_WEIGHTS = (4, 3, 3, 1)
USERS = ("ada", "grace", "linus", "")
# The share of runs that fail on a model provider's error.
FAILURE_RATE = 0.1


def _iso(moment: datetime) -> str:
    return moment.isoformat()


def _some_time_before(rng: random.Random, anchor: datetime, days: int) -> datetime:
    """A minute ``days`` days and up to half a day before ``anchor``. Every time is an
    offset from the anchor itself (not from its day's midnight), so any one stored run
    gives the anchor back to the minute."""
    return anchor - timedelta(days=days, hours=rng.randint(0, 12), minutes=rng.randrange(60))


class _Clock:
    """The time inside a run, moved on by each call."""

    def __init__(self, start: datetime, rng: random.Random):
        self.now, self.rng = start, rng

    def spend(self, low: float, high: float) -> tuple[str, str]:
        start = self.now
        self.now += timedelta(milliseconds=round(self.rng.uniform(low, high) * 1000))
        return _iso(start), _iso(self.now)


def _run(
    rng: random.Random,
    agent: Agent,
    task: Task,
    *,
    run_id: str,
    session_id: str,
    user: str,
    start: datetime,
    history: list[tuple[str, str]],
    failure: str | None = None,
    running: bool = False,
) -> dict[str, Any]:
    """A native run of ``agent`` doing ``task``: an iteration and a model call per step,
    then the answer; a failed run stops after a random step, a running one after its
    first model call, while its tool is still at work."""
    clock = _Clock(start, rng)
    messages = [{"role": "system", "content": agent.instructions, "part": "instructions"}]
    for asked, answered in history:
        messages += [
            {"role": "user", "content": asked, "part": "history"},
            {"role": "assistant", "content": answered, "part": "history"},
        ]
    messages.append({"role": "user", "content": task.input, "part": "input"})
    steps = list(task.steps)
    if failure:
        steps = steps[: rng.randrange(1, len(steps) + 1)] if steps else []
    if running:
        steps = steps[:1]
    input_tokens = rng.randint(300, 700) + sum(len(a) + len(b) for a, b in history) // 4
    previous_input = 0

    def model_call(output: str | None, finish_reason: str, output_tokens: int) -> dict[str, Any]:
        nonlocal input_tokens, previous_input
        started, ended = clock.spend(0.6, 4.5)
        call = {
            "model": agent.model,
            "provider": agent.provider,
            "messages": list(messages),
            "output": output,
            "finish_reason": finish_reason,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "started_at": started,
            "ended_at": ended,
        }
        # Each call resends the previous one's prompt: providers cache that prefix.
        if previous_input and agent.provider != "ollama":
            call["cached_tokens"] = previous_input // 128 * 128
        previous_input = input_tokens
        input_tokens += output_tokens + rng.randint(120, 600)
        return call

    iterations = []
    for index, step in enumerate(steps, start=1):
        iteration_start = clock.now
        call = model_call(None, "tool_calls", rng.randint(18, 90))
        tool: dict[str, Any] = {"tool": step.tool, "call_id": f"call-{index}", "params": step.params}
        if running:
            tool.update(result=None, error=None, started_at=_iso(clock.now))
        else:
            started, ended = clock.spend(*agent.tool_seconds)
            tool.update(result=step.result, error=step.error, started_at=started, ended_at=ended)
            messages.append({"role": "tool", "content": step.result or step.error or "", "part": "run"})
        iteration = {
            "index": index,
            "thought": step.thought,
            "tool_calls": [tool],
            "model_calls": [call],
            "started_at": _iso(iteration_start),
        }
        if not running:
            iteration["ended_at"] = _iso(clock.now)
        iterations.append(iteration)
    run: dict[str, Any] = {
        "schema": "agent-history/v1",
        "run_id": run_id,
        "session_id": session_id,
        "kind": "agent",
        "agent_name": agent.name,
        "user_id": user,
        "framework": "agent-history",
        "input": task.input,
        "started_at": _iso(start),
        "iterations": iterations,
    }
    if running:
        return {**run, "status": "running"}
    if failure:
        clock.spend(0.2, 3.0)  # the call that failed
        return {**run, "status": "failed", "error": failure, "ended_at": _iso(clock.now)}
    iteration_start = clock.now
    call = model_call(task.output, "stop", rng.randint(120, 650))
    iterations.append(
        {
            "index": len(iterations) + 1,
            "thought": "Enough to answer." if steps else None,
            "tool_calls": [],
            "model_calls": [call],
            "started_at": _iso(iteration_start),
            "ended_at": _iso(clock.now),
        }
    )
    return {**run, "status": "completed", "output": task.output, "ended_at": _iso(clock.now)}


def _session(
    rng: random.Random, agent: Agent, session_id: str, first_start: datetime, runs: int
) -> list[dict[str, Any]]:
    """``runs`` runs of one agent and user, each a few minutes after the one before, some
    of them failed."""
    user = rng.choice(USERS)
    first_task = rng.randrange(len(agent.tasks))
    start, history, items = first_start, [], []
    for n in range(runs):
        task = agent.tasks[(first_task + n) % len(agent.tasks)]
        failure = rng.choice(agent.failures) if rng.random() < FAILURE_RATE else None
        run = _run(
            rng,
            agent,
            task,
            run_id=f"{session_id}-run-{n + 1}",
            session_id=session_id,
            user=user,
            start=start,
            history=history[-2:],
            failure=failure,
        )
        items.append(run)
        if run["status"] == "completed":
            history.append((task.input, task.output))
        start = datetime.fromisoformat(run["ended_at"]) + timedelta(minutes=rng.randint(2, 40))
    return items


def generated_runs(anchor: datetime) -> list[dict[str, Any]]:
    """About one session a day over the four weeks before ``anchor``, at different hours,
    and one session whose last run started three minutes before ``anchor`` and is still
    running."""
    rng = random.Random(SEED)
    items: list[dict[str, Any]] = []
    number = 0
    for days_before in range(DAYS, 0, -1):
        for _ in range(rng.choices((0, 1, 2), weights=(2, 4, 3))[0]):
            number += 1
            agent = rng.choices(AGENTS, weights=AGENT_WEIGHTS)[0]
            # A session lasts at most about three hours: even the last day's end before
            # the anchor.
            first = _some_time_before(rng, anchor, days_before)
            items += _session(rng, agent, f"demo-{agent.slug}-{number:02d}", first, rng.randint(1, 4))
    # The live session: a run half an hour before the anchor (it lasts a minute at most)
    # and one started three minutes before it, still running.
    reviewer, session_id = AGENTS[1], "demo-review-live"
    done = _run(
        rng,
        reviewer,
        reviewer.tasks[0],
        run_id=f"{session_id}-run-1",
        session_id=session_id,
        user="ada",
        start=anchor - timedelta(minutes=30),
        history=[],
    )
    running = _run(
        rng,
        reviewer,
        reviewer.tasks[2],
        run_id=f"{session_id}-run-2",
        session_id=session_id,
        user="ada",
        start=anchor - timedelta(minutes=3),
        history=[],
        running=True,
    )
    return [*items, done, running]


def _moved(value: Any, delta: timedelta) -> Any:
    """A native record with every ``*_at`` time moved by ``delta``."""
    if isinstance(value, dict):
        return {
            key: _iso(datetime.fromisoformat(item) + delta)
            if key.endswith("_at") and isinstance(item, str)
            else _moved(item, delta)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_moved(item, delta) for item in value]
    return value


def _moved_autourgos(log: dict[str, Any], start: datetime) -> dict[str, Any]:
    """An autourgos log started at ``start`` (its naive times stay naive), under a run id of
    its own derived from the log as written: the same run whatever the anchor, and not the
    run the file itself is (the README's example sends a sample file to a fresh quickstart,
    which must create that run, not rewrite the demo's copy and move it to another day's
    session). Its session is the agent's day as autourgos has it, the day it now starts."""
    delta = start.replace(tzinfo=None) - datetime.fromisoformat(log["start_time"])
    times = {
        key: (datetime.fromisoformat(log[key]) + delta).isoformat() for key in ("start_time", "end_time")
    }
    return {**log, **times, "run_id": autourgos.derive_run_id({"demo copy of": log})}


def _sample_files() -> list[Path]:
    return sorted(DEMO_DIR.glob("*.json"))


def sample_items(anchor: datetime) -> list[list[Any]]:
    """The sample files' items, one list per file: the team and the workflow sessions moved
    whole, the autourgos logs spread over the four weeks at different hours."""
    rng = random.Random(f"{SEED}:samples")
    batches = []
    for path in _sample_files():
        data = json.loads(path.read_text())
        items = data if isinstance(data, list) else [data]
        if path.name.startswith("autourgos_"):
            start = _some_time_before(rng, anchor, rng.randint(1, DAYS))
            batches.append([_moved_autourgos(log, start) for log in items])
            continue
        before = TEAM_BEFORE if path.name.startswith("team_") else WORKFLOW_BEFORE
        first = min(datetime.fromisoformat(item["started_at"]) for item in items)
        delta = anchor - before - first
        batches.append([_moved(item, delta) for item in items])
    return batches


def demo_batches(anchor: datetime) -> list[list[Any]]:
    """Everything ``quickstart`` sends, placed around ``anchor`` (aware, the minute the
    demo was first loaded): a list of items per sample file, in the files' order (a
    workflow run's history links to the runs before it), then the generated runs."""
    return [*sample_items(anchor), generated_runs(anchor)]


def _reference_starts() -> dict[str, datetime]:
    """Each native demo run's start when the anchor is ``REFERENCE_ANCHOR``, the generated
    ones first (no file a user might send by hand has their ids)."""
    batches = demo_batches(REFERENCE_ANCHOR)
    native = [item for batch in [batches[-1], *batches[:-1]] for item in batch if "schema" in item]
    return {item["run_id"]: datetime.fromisoformat(item["started_at"]) for item in native}


def anchor_for(*, project_id: int, now: datetime) -> datetime:
    """The minute the demo was first loaded into the project, read back from the start of
    a demo run stored there; ``now`` (to the minute) when none is."""
    from history_app.models import Run

    reference = _reference_starts()
    stored = dict(
        Run.objects.filter(
            project_id=project_id, run_id__in=list(reference), started_at__isnull=False
        ).values_list("run_id", "started_at")
    )
    for run_id, started_at in reference.items():
        if run_id in stored:
            return REFERENCE_ANCHOR + (stored[run_id] - started_at)
    return now.astimezone(UTC).replace(second=0, microsecond=0)
