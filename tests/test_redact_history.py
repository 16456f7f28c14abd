"""``manage.py redact_history``: the current rules applied to what an older version stored."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.db import transaction

from history_app import models
from history_app.agent_history import formats
from history_app.agent_history.records import RecordError
from history_app.intake import ingestion, writer
from history_app.reading.rendering import render_markdown
from history_app.store import search
from history_app.upkeep import reredact

from .conftest import database_dump, load_jsonl, native

pytestmark = pytest.mark.django_db

SECRETS = load_jsonl("secrets.jsonl")
LEFTOVERS = [piece for entry in SECRETS for piece in (entry["secret"], *entry.get("fragments", []))]
# Written by the rules before this version: the PEM rule stopped at the first header
# ("Proc-Type"), the URL rule at the first '@' of the password.
OLD_PEM_BODY = "FAKEoldBodyLine0123456789abcdefABCDEF+/"
OLD_PASSWORD_TAIL = "ss@w0rdFAKEold"
# The SQLite full-text index stores terms lower-cased (and prefix-compressed): a
# lower-case secret shows whether its old terms really left the index.
LOWER_CASE_SECRET = "zqxfakelowercasesecret"


def raw_items() -> list[dict]:
    """Runs as a database filled before the current rules holds them, in every table."""
    items = []
    for i, entry in enumerate(SECRETS):
        text = entry["placements"][0].get("text") or json.dumps(entry["placements"][0]["params"])
        items.append(
            native(
                f"old-{i}",
                session_id=f"s-{i % 5}",
                user_id=entry["secret"][:200] if i % 7 == 0 else "alice",
                input=f"use {entry['secret']}",
                output=f"**Answer** with {text}",
                agent_name=entry["secret"][:200] if i % 11 == 3 else "agent",
                iterations=[
                    {
                        "thought": text,
                        "tool_calls": [
                            {
                                "tool": "fetch",
                                "params": {entry["secret"]: {"v": entry["secret"]}},
                                "result": text,
                            }
                        ],
                        "model_calls": [
                            {
                                "model": "gpt-4o",
                                "messages": [{"role": "user", "content": f"use {entry['secret']}"}],
                                "output": text,
                                "input_tokens": 10,
                                "output_tokens": 2,
                            }
                        ],
                    }
                ],
                member_interactions=[{"member": "helper", "task": text, "response": "ok"}],
                injected_contexts=[{"text": f"history: {text}", "kind": "custom", "settings": {"k": text}}],
                metadata={entry["secret"]: 1, "nested": {"list": [{entry["secret"]: text}]}},
                metrics={"note": text},
                redactions={entry["secret"]: 1},
            )
        )
    items.append(
        native(
            "old-partial",
            session_id="s-partial",
            user_id=SECRETS[4]["secret"],
            agent_name=SECRETS[5]["secret"],
            output=f"config password={LOWER_CASE_SECRET}9 done",
            input=(
                "[REDACTED:pem-private-key]-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,FAKE0011\n\n"
                f"{OLD_PEM_BODY}\n-----END RSA PRIVATE KEY-----\nand postgres://u:[REDACTED:url-credentials]@"
                f"{OLD_PASSWORD_TAIL}@db.example.com/app"
            ),
            redactions={"pem-private-key": 1, "url-credentials": 1},
        )
    )
    return items


def store_raw(items: list[dict]) -> None:
    """Store without redaction, the way runs stored before a rule existed are held."""
    for item in items:
        for run in formats.parse(item):
            writer.write_run(run=run, source_format="native")
    models.IngestReceipt.objects.create(
        project=models.Project.default(),
        source="api",
        label=f"import of {SECRETS[0]['secret']}",
        counts={"rejected": 1},
        rejections=[
            {"index": 0, "run_id": "x", "path": f"$.metadata.{SECRETS[2]['secret']}", "message": "bad"}
        ],
        changed_fields=[
            {"run_id": "x", "path": f"$.params.{SECRETS[3]['secret']}", "rules": {"secret-key": 1}}
        ],
    )


PIECES = [*LEFTOVERS, OLD_PEM_BODY, OLD_PASSWORD_TAIL, LOWER_CASE_SECRET]
# A fifth of the corpus's pieces repeat (two entries share a secret or a fragment): each
# distinct piece is looked for once in a text (a dump, or each of the 467 runs' pages).
DISTINCT_PIECES = list(dict.fromkeys(PIECES))


def leaks(text: str) -> list[str]:
    found = {piece for piece in DISTINCT_PIECES if piece in text}
    return [piece for piece in PIECES if piece in found]


def redact_history(*args: str) -> str:
    out = io.StringIO()
    call_command("redact_history", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture(scope="class")
def stored_raw(django_db_setup, django_db_blocker):
    """The corpus stored unredacted once for the tests of a class: each test's transaction
    is a savepoint inside the one opened here, so what a test redacts is rolled back before
    the next one starts from the same old database; this one is rolled back at the class's
    end. Storing the corpus run by run through the writer (as runs were stored before a
    rule existed) is a third of this file's time: it was done once per test."""
    items = raw_items()
    with django_db_blocker.unblock(), transaction.atomic():
        store_raw(items)
        yield items
        transaction.set_rollback(True)


class TestADatabaseStoredUnderOlderRules:
    def test_redact_history_removes_what_older_rules_kept_and_a_resend_stays_duplicate(
        self, stored_raw, ingest, alice_client
    ):
        items = stored_raw
        before = database_dump()
        assert leaks(before)
        # A session shows its latest run's user id, so which sessions hold a secret depends on
        # how the corpus lines fall into the five sessions: count them from the stored rows.
        sessions = list(models.Session.objects.all())
        assert len(sessions) == 6  # s-0 … s-4 and s-partial
        shown = {s.session_id: [s.user_id, s.agent_name, s.framework] for s in sessions}
        holding = [
            sid for sid, fields in shown.items() if ingestion.server_redactor().redact(fields) != fields
        ]
        assert "s-partial" in holding

        preview = redact_history("--dry-run")
        assert f"Would change: {len(items)} of {len(items)} runs" in preview
        assert "slack: " in preview and "pem-private-key: " in preview and "redactions-map: " in preview
        assert database_dump() == before

        summary = redact_history("--batch-size", "7")
        assert f"Changed: {len(items)} of {len(items)} runs" in summary
        assert f"{len(holding)} of {len(sessions)} sessions, 1 of 1 receipts" in summary
        dump = database_dump()
        assert leaks(dump) == []
        for run in models.Run.objects.all():
            assert run.output_html == render_markdown(run.output)
            assert set(run.redactions) <= ingestion.server_redactor().rule_names
            page = alice_client.get(run.get_absolute_url()).content.decode()
            assert leaks(page) == []
        assert not models.Run.objects.filter(pk__in=search.matching_run_pks("FAKEkvAsKey99")).exists()
        # The daily usage per agent follows the agents' redacted names, with the same sums.
        usage = {a: c for a, c in models.DailyUsage.objects.values_list("agent", "calls") if c}
        expected: dict[str, int] = {}
        for agent, calls in models.Run.objects.values_list("agent_name", "model_call_count"):
            if calls:
                expected[agent] = expected.get(agent, 0) + calls
        assert usage == expected and sum(usage.values()) == len(items) - 1

        again = redact_history()
        assert (
            f"Changed: 0 of {len(items)} runs, 0 of {len(sessions)} sessions, 0 of 1 receipts, 0 of 0 annotations."
            in again
        )
        assert database_dump() == dump

        # The original, unredacted runs are redacted on arrival to the very same records...
        results = ingest(items).json()["results"]
        assert [r["status"] for r in results if r["run_id"] != "old-partial"] == ["duplicate"] * (
            len(items) - 1
        )
        # ...and so is each stored run exported and sent again.
        for run_id in ("old-0", "old-partial"):
            exported = json.loads(alice_client.get(f"/api/v1/runs/{run_id}").getvalue())["run"]
            assert ingest(exported).json()["results"][0]["status"] == "duplicate"

    def test_an_interrupted_pass_is_finished_by_the_next(self, stored_raw, ingest):
        items = stored_raw

        def interrupt(result: reredact.RedactResult) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            reredact.redact_stored(batch_size=4, progress=interrupt)
        assert len(leaks(database_dump())) > 0
        assert models.Run.objects.filter(run_id__in=["old-0", "old-3"]).exclude(redactions={}).count() == 2

        result = reredact.redact_stored(batch_size=4)
        assert result.changed["runs"] == len(items) - 4
        assert leaks(database_dump()) == []
        assert all(r["status"] == "duplicate" for r in ingest(items[:-1]).json()["results"])


def test_a_database_filled_through_the_endpoint_is_left_as_it_is(ingest):
    ingest([item for item in raw_items() if item["run_id"] != "old-partial"])
    before = database_dump()
    assert "Changed: 0 of" in redact_history()
    assert database_dump() == before


def test_a_run_that_no_longer_validates_is_named_and_the_rest_is_done(monkeypatch):
    store_raw(raw_items()[:3])
    prepare_run = ingestion.prepare_run

    def refuse_old_1(run, **kwargs):
        if run.run_id == "old-1":
            raise RecordError([("$.iterations[0].metadata", "too deep")])
        return prepare_run(run, **kwargs)

    monkeypatch.setattr(ingestion, "prepare_run", refuse_old_1)
    errors = io.StringIO()
    out = io.StringIO()
    call_command("redact_history", stdout=out, stderr=errors)
    assert "Changed: 2 of 3 runs" in out.getvalue()
    assert "1 runs were left as they are" in errors.getvalue() and "old-1" in errors.getvalue()


def test_annotations_stored_before_the_current_rules_are_redacted_too(ingest):
    """Issue #18: a score's name or a comment written under older rules (stored here as
    they were) is redacted by the upgrade pass like every stored text."""
    ingest(native("r-1", "s-1"))
    run = models.Run.objects.get(run_id="r-1")
    secrets = [entry["secret"] for entry in SECRETS[:10]]
    for secret in secrets:
        models.Annotation.objects.create(
            project_id=run.project_id, run=run, kind="comment", text=f"note: {secret}", author="old"
        )
    result = reredact.redact_stored()
    assert result.changed["annotations"] == len(secrets) and result.scanned["annotations"] == len(secrets)
    stored = "\n".join(models.Annotation.objects.values_list("text", flat=True))
    assert not [piece for piece in LEFTOVERS if piece in stored]
