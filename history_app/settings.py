"""One settings file, driven by environment variables.

Every variable is read through a small typed helper that raises ``ImproperlyConfigured``
on a bad value (a typo in ``DEBUG`` must not silently mean False). Secrets can also come
from ``NAME_FILE`` (Docker/Kubernetes secrets). With no ``DATABASE_URL`` the app runs on
SQLite in ``HISTORY_DATA_DIR`` so ``quickstart`` works straight after checkout.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    file_name = os.environ.get(f"{name}_FILE")
    if value is None and file_name:
        try:
            value = Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_name!r} cannot be read: {exc}") from exc
    return value


def env_str(name: str, default: str = "") -> str:
    value = _raw(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false, 1/0, yes/no)")


def env_int(name: str, default: int | None, *, minimum: int = 0, maximum: int | None = None) -> int | None:
    value = _raw(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r} must be at least {minimum}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={value!r} must be at most {maximum}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


DATA_DIR = Path(env_str("HISTORY_DATA_DIR", str(BASE_DIR / "var")))
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])


def _secret_key() -> str:
    """SECRET_KEY from the environment, else one generated once and kept in DATA_DIR.

    The laptop quickstart needs no configuration, and the key survives restarts so
    sessions stay valid; production sets SECRET_KEY (or SECRET_KEY_FILE) explicitly.
    """
    value = _raw("SECRET_KEY")
    if value:
        if len(value) < 32:
            raise ImproperlyConfigured("SECRET_KEY must be at least 32 characters")
        return value
    path = DATA_DIR / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    # Several processes may start at once (gunicorn workers, test workers): the key is
    # written whole to a file of this process's own, then linked into place, which fails
    # if another process got there first. So no process ever reads a half-written key,
    # and all of them end up with the one that won.
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    draft = DATA_DIR / f".secret_key.{os.getpid()}.{secrets.token_hex(4)}"
    draft.write_text(secrets.token_urlsafe(50))
    draft.chmod(0o600)
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        draft.unlink()
    return path.read_text().strip()


SECRET_KEY = _secret_key()

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "csp",
    "axes",
    "history_app.apps.HistoryAppConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Responses to a logged-in user or a token are nobody else's: kept by no cache.
    "history_app.middleware.PrivateCacheControlMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # A transient database failure in a view answers 503 with Retry-After, not a 500.
    "history_app.errors.DatabaseUnavailableMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "history_app.urls"
WSGI_APPLICATION = "history_app.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "csp.context_processors.nonce",
                "history_app.access.roles.context",
            ],
        },
    },
    {
        # The JSON trees of the run pages, thousands of lines each, drawn by Jinja2 (about
        # five times faster than the engine above) with autoescaping; templates/jinja2/
        # only, so it never reads a Django template (history_app/reading/jinja.py).
        "NAME": "jinja2",
        "BACKEND": "django.template.backends.jinja2.Jinja2",
        "DIRS": [BASE_DIR / "templates" / "jinja2"],
        "APP_DIRS": False,
        "OPTIONS": {"environment": "history_app.reading.jinja.environment"},
    },
]

# Every SQLite database, however it is named, gets the same options. IMMEDIATE takes the
# write lock when a transaction starts, so two writers queue on the busy timeout instead of
# failing with "database is locked" when one of them tries to upgrade a read lock.
SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    "init_command": (
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
        "PRAGMA foreign_keys=ON; PRAGMA busy_timeout=20000;"
    ),
}


def _postgresql_connections(database: dict) -> dict:
    """How the app holds its PostgreSQL connections: a pool per process, bounded.

    Django keeps a connection per thread. ``runserver`` (and ``quickstart``, which serves
    with it) runs each request in a thread of its own, so connections kept for reuse
    (``CONN_MAX_AGE``) piled up with the threads until the server refused more, and stayed
    held while idle. A pool (psycopg_pool, through Django's ``OPTIONS["pool"]``) lends a
    request one of at most ``DATABASE_POOL_MAX_SIZE`` connections, takes it back at the
    end of the request, makes a request wait up to ``DATABASE_POOL_TIMEOUT`` seconds for
    one (then 503, Retry-After) and closes one idle connection every
    ``DATABASE_POOL_MAX_IDLE`` seconds, down to none. A gunicorn sync worker uses one
    connection of its pool at a time, reused from request to request as a persistent one
    would be. ``DATABASE_POOL_MAX_SIZE=0`` turns the pool off: then each thread keeps its
    connection ``DATABASE_CONN_MAX_AGE`` seconds (only for servers with a fixed number of
    threads, such as gunicorn's sync workers)."""
    max_size = env_int("DATABASE_POOL_MAX_SIZE", 4)
    conn_max_age = env_int("DATABASE_CONN_MAX_AGE", None)
    if not max_size:
        database["CONN_MAX_AGE"] = 60 if conn_max_age is None else conn_max_age
        return database
    if conn_max_age:
        raise ImproperlyConfigured(
            f"DATABASE_CONN_MAX_AGE={conn_max_age} keeps a connection per thread, which the "
            f"connection pool (DATABASE_POOL_MAX_SIZE={max_size}) replaces: unset it, or set "
            "DATABASE_POOL_MAX_SIZE=0 to keep connections per thread instead of pooling them"
        )
    timeout = env_int("DATABASE_POOL_TIMEOUT", 10, minimum=1)
    database["CONN_MAX_AGE"] = 0  # the pool keeps them; Django gives each back after its request
    database["OPTIONS"] = {
        **database.get("OPTIONS", {}),
        "pool": {
            "min_size": 0,
            "max_size": max_size,
            "timeout": timeout,
            "max_idle": env_int("DATABASE_POOL_MAX_IDLE", 30, minimum=1),
            # A pool whose server went away tries again for this long before it gives up
            # and lets the next request start a new try: a restarted server is found within
            # seconds, not after the backoff of the default five minutes.
            "reconnect_timeout": timeout,
        },
    }
    return database


DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_health_checks=True)}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        DATABASES["default"] = _postgresql_connections(DATABASES["default"])
    else:
        DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60)
else:
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DATA_DIR / "history.sqlite3"}}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {**SQLITE_OPTIONS, **DATABASES["default"].get("OPTIONS", {})}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Login throttling (django-axes): after HISTORY_LOGIN_FAILURE_LIMIT wrong passwords for
# one username from one address, that pair is locked out for HISTORY_LOGIN_COOLOFF_MINUTES
# (the dashboard's and the admin's login alike); a successful login resets the count.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("HISTORY_LOGIN_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("HISTORY_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "history_app.access.lockout.locked_out"
AXES_VERBOSE = False

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True
# The admin shows dates as the rest of the site does ("2026-11-30 22:00:00").
FORMAT_MODULE_PATH = ["history_app.formats"]

STATIC_URL = "/static/"
# Set STATIC_ROOT to run collectstatic (production); unset, files are served from the apps.
STATIC_ROOT = Path(env_str("STATIC_ROOT")) if env_str("STATIC_ROOT") else None
STATICFILES_DIRS = [BASE_DIR / "static"]
# Serve straight from the app and package folders, so no collectstatic step is needed on
# a laptop; production may still run collectstatic for compressed, cache-busted files.
WHITENOISE_USE_FINDERS = True

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
# HTTPS in production, plain HTTP on a laptop: everything below is off unless set.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", SECURE_SSL_REDIRECT)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Behind a proxy that ends TLS, trust its X-Forwarded-Proto (only then: a client could
# otherwise claim HTTPS), so the redirect does not loop and request.is_secure() is right.
if env_bool("HISTORY_BEHIND_HTTPS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# A strict policy: no inline script or style, nothing from another origin.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# Ingestion limits. The whole body is refused above HISTORY_MAX_BODY_BYTES (413).
HISTORY_MAX_BODY_BYTES = env_int("HISTORY_MAX_BODY_BYTES", 10 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = max(HISTORY_MAX_BODY_BYTES, 2_621_440)
# Any stored text field longer than this is cut, with a marker, before it is written.
# A request holding more runs than this is refused whole (413), before anything is stored,
# so one request never outlives a worker timeout.
HISTORY_MAX_ITEMS_PER_REQUEST = env_int("HISTORY_MAX_ITEMS_PER_REQUEST", 1000, minimum=1)
HISTORY_MAX_FIELD_CHARS = env_int("HISTORY_MAX_FIELD_CHARS", 256 * 1024, minimum=1024)
# OpenTelemetry intake (POST /v1/traces): a gzip body may decompress to at most this many
# bytes (413 above), and a request may hold at most this many spans (413 above; the
# standard batch processor sends 512 at a time).
HISTORY_OTLP_MAX_DECOMPRESSED_BYTES = env_int(
    "HISTORY_OTLP_MAX_DECOMPRESSED_BYTES", 20 * 1024 * 1024, minimum=1024
)
HISTORY_OTLP_MAX_SPANS = env_int("HISTORY_OTLP_MAX_SPANS", 10_000, minimum=1)
# Elements of repeated fields a request may hold in all (spans, attributes, events,
# links, array and key-value list values; a JSON body four values per element), counted
# before it is decoded (413 above): tiny elements cost the decoder far more than their size.
HISTORY_OTLP_MAX_ELEMENTS = env_int("HISTORY_OTLP_MAX_ELEMENTS", 500_000, minimum=1000)
# Spans kept per trace: each request assembles its traces again from all their spans, so
# a trace that never ends would make every request slower than the one before.
HISTORY_OTLP_MAX_TRACE_SPANS = env_int("HISTORY_OTLP_MAX_TRACE_SPANS", 20_000, minimum=1)
# Rendering one text as Markdown may take this long; a text that would take longer is
# shown escaped, as preformatted text under a note (history_app/reading/rendering.py).
HISTORY_MARKDOWN_BUDGET_MS = env_int("HISTORY_MARKDOWN_BUDGET_MS", 500, minimum=0)
# Levels of objects/arrays in an ingested item (400 above). Capped well below Python's
# recursion limit, which the code that copies, redacts and shows values relies on.
# Messages kept per model call (the first ten and the most recent): each call of a loop
# receives every message before it. How many a call left out is stored with it.
HISTORY_MAX_CALL_MESSAGES = env_int("HISTORY_MAX_CALL_MESSAGES", 100, minimum=20, maximum=10_000)
HISTORY_MAX_DEPTH = env_int("HISTORY_MAX_DEPTH", 64, minimum=8, maximum=200)
HISTORY_PAGE_SIZE = env_int("HISTORY_PAGE_SIZE", 50, minimum=1)
HISTORY_IDLE_GAP_SECONDS = env_int("HISTORY_IDLE_GAP_SECONDS", 300, minimum=1)
# A run page shows its first HISTORY_RUN_PAGE_ITERATIONS iterations, the first
# HISTORY_RUN_PAGE_TOOL_CALLS tool calls of each and its first HISTORY_RUN_PAGE_CONTEXTS
# injected contexts; "show more" loads the next slice of each.
HISTORY_RUN_PAGE_ITERATIONS = env_int("HISTORY_RUN_PAGE_ITERATIONS", 20, minimum=1)
# Model calls listed on a run page at a time (each call's messages are on its own page),
# and the characters of a message a call's page shows before "show all".
HISTORY_RUN_PAGE_MODEL_CALLS = env_int("HISTORY_RUN_PAGE_MODEL_CALLS", 50, minimum=1)
HISTORY_MESSAGE_PREVIEW_CHARS = env_int("HISTORY_MESSAGE_PREVIEW_CHARS", 20_000, minimum=100)
HISTORY_RUN_PAGE_TOOL_CALLS = env_int("HISTORY_RUN_PAGE_TOOL_CALLS", 20, minimum=1)
HISTORY_RUN_PAGE_CONTEXTS = env_int("HISTORY_RUN_PAGE_CONTEXTS", 20, minimum=1)
# Comparing two runs aligns their first HISTORY_COMPARE_ITERATIONS iterations, and the
# first HISTORY_COMPARE_CALLS tool calls of each, model calls and injected contexts.
HISTORY_COMPARE_ITERATIONS = env_int("HISTORY_COMPARE_ITERATIONS", 50, minimum=1)
HISTORY_COMPARE_CALLS = env_int("HISTORY_COMPARE_CALLS", 50, minimum=1)
# A session page shows at most this many items of each list nested in a run's row (a team
# run's member interactions, a workflow run's steps), with the total and a link to the rest.
HISTORY_SESSION_PAGE_NESTED = env_int("HISTORY_SESSION_PAGE_NESTED", 20, minimum=1)
# Retention: unset keeps everything forever. When set, a bounded prune (one batch) runs
# every HISTORY_RETENTION_EVERY_RUNS ingested runs; `prune_history` is there for cron.
HISTORY_RETENTION_DAYS = env_int("HISTORY_RETENTION_DAYS", None, minimum=1)
HISTORY_RETENTION_EVERY_RUNS = env_int("HISTORY_RETENTION_EVERY_RUNS", 1000, minimum=1)
HISTORY_RETENTION_BATCH_SIZE = env_int("HISTORY_RETENTION_BATCH_SIZE", 500, minimum=1)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
