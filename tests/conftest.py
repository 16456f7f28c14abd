from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.test import override_settings
from hypothesis import settings as hypothesis_settings

# pytest keeps each test module's assertion-rewritten code in __pycache__ and reuses it
# from the next run on, unless bytecode caches are switched off: some machines (this
# project's CI among them) set PYTHONDONTWRITEBYTECODE=1, and every pytest process then
# rewrote all 90 test modules again, about 8 s of CPU a process, each xdist worker
# included. The suite writes them (__pycache__ is ignored by git).
sys.dont_write_bytecode = False

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
AUTOURGOS = FIXTURES / "autourgos"
CORPORA = FIXTURES / "corpora"
TOKEN = "aht_test-token-for-the-suite-0123456789"

# Property tests draw few examples in a contributor's run and each test's own number where
# HYPOTHESIS_PROFILE=thorough (.ci/run sets it); an unknown name fails loudly here. No
# deadline in either: an example's wall time is no property of the code (timings are the
# benchmarks' business), and on a machine shared by other work a 200 ms deadline failed
# examples that took 0.3 ms when Hypothesis tried them again.
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "quick")
QUICK_EXAMPLES = 25
hypothesis_settings.register_profile("quick", max_examples=QUICK_EXAMPLES, deadline=None)
hypothesis_settings.register_profile("thorough", print_blob=True, deadline=None)
hypothesis_settings.load_profile(HYPOTHESIS_PROFILE)


def examples(thorough: int) -> int:
    """How many examples a property test draws: ``thorough`` under the thorough profile,
    else the quick profile's (never more than ``thorough``). Explicit ``@example`` cases
    run under both."""
    if HYPOTHESIS_PROFILE == "thorough":
        return thorough
    return min(thorough, QUICK_EXAMPLES)


def native(run_id: str = "r-1", session_id: str = "s-1", **fields) -> dict:
    """A run in the project's own format (``agent-history/v1``)."""
    return {"schema": "agent-history/v1", "run_id": run_id, "session_id": session_id, **fields}


def autourgos_logs() -> list[Path]:
    """The 11 real autourgos-history JSON logs."""
    return sorted(p for p in AUTOURGOS.glob("*.json") if p.name != "MANIFEST.json")


def load_jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (CORPORA / name).read_text().splitlines() if line.strip()]


def manifest() -> dict[str, dict]:
    """MANIFEST.json keyed by the JSON file name of each scenario."""
    return {entry["files"][0]: entry for entry in json.loads((AUTOURGOS / "MANIFEST.json").read_text())}


def database_dump(*, exclude: tuple[str, ...] = ()) -> str:
    """Every row of every table, as text: what an attacker with the database file sees."""
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            if table in exclude:
                continue
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            chunks.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(chunks)


@pytest.fixture(scope="session", autouse=True)
def fast_password_hasher():
    """Tests hash passwords with MD5: the production hasher costs about 0.3 s a password on
    purpose, and hundreds of tests create a user. Test settings only; production keeps
    Django's default hashers."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(scope="session", autouse=True)
def static_files_listed_once():
    """Every test client builds its own middleware, and WhiteNoise's lists and stats every
    static file the finders know (170 of them, Django's admin included) when it is built:
    8.6 ms a client, about 25 s of CPU over the suite's clients. A test process lists them
    once (for each set of settings that shapes the list) and each new middleware gets the
    same entries. Test settings only: a production process builds its middleware once."""
    from django.conf import settings
    from whitenoise.middleware import WhiteNoiseMiddleware

    original = WhiteNoiseMiddleware.add_files_from_finders
    listed: dict[tuple, dict] = {}

    def add_files_from_finders(self):
        key = (
            self.static_prefix,
            self.max_age,
            self.charset,
            self.allow_all_origins,
            repr(settings.STATICFILES_DIRS),
            tuple(settings.INSTALLED_APPS),
        )
        if key not in listed:
            before = dict(self.files)
            original(self)
            listed[key] = {url: found for url, found in self.files.items() if before.get(url) is not found}
        self.files.update(listed[key])

    WhiteNoiseMiddleware.add_files_from_finders = add_files_from_finders
    yield
    WhiteNoiseMiddleware.add_files_from_finders = original


# Rows Django's post_migrate signal makes for every model, the same after each flush: they
# are kept, and the signal that follows each flush finds them there instead of writing
# them all again (a row a test deletes is made again by it, as before).
KEPT_BY_THE_FLUSH = frozenset({"django_content_type", "auth_permission"})


@pytest.fixture(scope="session", autouse=True)
def cheaper_flush():
    """After each transactional test (live server, threads, subprocesses) Django empties
    every table, then its post_migrate signal writes every content type and permission
    again (about 0.15 s a test). Two costs are cut, test settings only:

    - the content types and permissions are left in place (``KEPT_BY_THE_FLUSH``);
    - on PostgreSQL, ``DELETE FROM`` each table instead of one ``TRUNCATE`` of them all,
      which gives each table new files: 0.8 s of a test's 1.0 s teardown in
      ``test_sinks.py``, for tables that hold a few rows. The foreign keys Django makes on
      PostgreSQL are checked at commit, when every table is empty; this is how Django
      empties SQLite's tables. Sequences stay as they were, as with the ``TRUNCATE``
      without ``RESTART IDENTITY`` that Django uses unless a test asks for
      ``reset_sequences`` (which keeps it)."""
    from django.db.backends.postgresql.base import DatabaseWrapper as PostgreSQLWrapper
    from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteWrapper

    PostgreSQL, SQLite = PostgreSQLWrapper.ops_class, SQLiteWrapper.ops_class

    originals = {PostgreSQL: PostgreSQL.sql_flush, SQLite: SQLite.sql_flush}

    def postgresql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        tables = [t for t in tables if t not in KEPT_BY_THE_FLUSH]
        if reset_sequences or not tables:
            return originals[PostgreSQL](
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return [f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(t))};" for t in tables]

    def sqlite_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        tables = [t for t in tables if t not in KEPT_BY_THE_FLUSH]
        return originals[SQLite](
            self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
        )

    PostgreSQL.sql_flush, SQLite.sql_flush = postgresql_flush, sqlite_flush
    yield
    for cls, original in originals.items():
        cls.sql_flush = original


@pytest.fixture(autouse=True)
def search_index_emptied_with_the_tables(request, django_db_blocker):
    """After a transactional test (live server, threads, subprocesses), SQLite's search
    index is emptied as Django's flush empties the tables: the FTS5 table is not a model,
    so the flush leaves its documents behind. They would match runs of later tests
    whenever a run's key comes round again (a test that migrates backwards remakes the
    runs' table, and its keys restart at 1): a search then found a second session."""
    yield
    marker = request.node.get_closest_marker("django_db")
    transactional = {"transactional_db", "live_server"} & set(request.fixturenames) or (
        marker is not None and marker.kwargs.get("transaction")
    )
    if not transactional or connection.vendor != "sqlite":
        return
    from history_app.store import search

    with django_db_blocker.unblock():
        search.clear_index()


@pytest.fixture(scope="session")
def migrated_sqlite_file(tmp_path_factory) -> Path:
    """A SQLite file with every migration applied by ``manage.py migrate`` in another
    process, made once a test process (about 5 s of CPU each time) for the tests that run
    real processes on a file of their own: each copies it (``copy_migrated``)."""
    folder = tmp_path_factory.mktemp("migrated")
    env = {**os.environ, "HISTORY_DATA_DIR": str(folder), "DJANGO_SETTINGS_MODULE": "history_app.settings"}
    env.pop("DATABASE_URL", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    template = folder / "history.sqlite3"
    # Whatever the migrating process left in the write-ahead log goes into the file.
    with contextlib.closing(sqlite3.connect(template)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return template


def copy_migrated(template: Path, target: Path) -> None:
    """``target`` becomes a copy of the migrated file, as ``manage.py migrate`` left it
    (in the write-ahead-log mode the settings ask for)."""
    shutil.copyfile(template, target)


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium for a module's browser tests (launching one costs about a
    second of CPU); each test opens its own context, with its own cookies, storage and
    cache. Module scope, not session: Playwright's sync API keeps an event loop running
    while it is open, and other modules' tests call asyncio.run()."""
    from .test_browser import launch, sync_api

    with sync_api.sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


@pytest.fixture
def token(db):
    from history_app.access.auth import register_token

    register_token(name="suite", token=TOKEN, scopes=["ingest", "read"])
    return TOKEN


@pytest.fixture
def auth_headers(token):
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.fixture
def alice(db, django_user_model):
    """A logged-in dashboard user, an editor of the default project (where runs go
    unless a token of another project sends them)."""
    from history_app.models import Membership, Project

    user = django_user_model.objects.create_user("alice", password="alice-password-1")
    Membership.objects.create(project=Project.default(), user=user, role=Membership.EDITOR)
    return user


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    # The project she last opened, as her first page would remember it: the pages' query
    # counts are then what every later page makes.
    session = client.session
    session["history_project"] = "default"
    session.save()
    return client


@pytest.fixture
def ingest(client, auth_headers):
    """POST a JSON body to the ingestion endpoint and return the response."""

    def post(payload, content_type="application/json", **extra):
        body = payload if isinstance(payload, str | bytes) else json.dumps(payload)
        return client.post("/api/v1/ingest", body, content_type=content_type, **auth_headers, **extra)

    return post


@pytest.fixture(params=["memory", "sqlite"])
def history_store(request, tmp_path):
    """Each library store in turn: the same behaviour is owed by both."""
    from history_app.agent_history import MemoryStore, SQLiteStore

    if request.param == "memory":
        yield MemoryStore()
        return
    store = SQLiteStore(str(tmp_path / "history.db"))
    yield store
    store.close()
