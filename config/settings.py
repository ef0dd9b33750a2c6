"""Settings for the nrllm_agents site. Deployment is configured by environment variables.

- ``DATABASE_URL``: default ``sqlite:///db.sqlite3`` (the embedded default); PostgreSQL in production.
- ``REDIS_URL``: unset means queued runs execute in-process; set it and run ``manage.py rqworker``.
- ``NRLLM_DB_POOL_MAX`` (default 10; 0 turns pooling off), ``NRLLM_DB_POOL_MIN`` (0),
  ``NRLLM_DB_POOL_TIMEOUT`` (30 s): on PostgreSQL, each process shares a bounded pool of at most
  ``NRLLM_DB_POOL_MAX`` connections among all its threads (Django's psycopg pool), and a segment
  gives its connection back between step boundaries, so hundreds of concurrent runs in one worker
  hold a handful of connections.
- ``DJANGO_SECRET_KEY`` (required unless ``DJANGO_DEBUG=1``), ``DJANGO_DEBUG`` (off unless set),
  ``DJANGO_ALLOWED_HOSTS``, ``DJANGO_CSRF_TRUSTED_ORIGINS``.
- HTTPS hardening (what ``manage.py check --deploy`` asks for): ``DJANGO_SECURE_SSL_REDIRECT``,
  ``DJANGO_SECURE_HSTS_SECONDS``, ``DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS``, ``DJANGO_SECURE_HSTS_PRELOAD``,
  ``DJANGO_SECURE_COOKIES`` (session and CSRF cookies over HTTPS only), ``DJANGO_SECURE_PROXY_SSL_HEADER``
  (``1`` trusts ``X-Forwarded-Proto: https`` from the reverse proxy).
- ``DJANGO_CORS_ALLOWED_ORIGINS``: origins (``https://chat.example.com``, comma-separated) whose
  pages may call ``/lg/`` and ``/api/`` (LangGraph's chat UI); none by default.
- ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``: for the ``openai`` provider.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import dj_database_url
import django
from corsheaders.defaults import default_headers as cors_default_headers
from django.core.exceptions import ImproperlyConfigured
from django.core.management.utils import get_random_secret_key

from nrllm_agents.conf import env
from nrllm_agents.observability.logs import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool) -> bool:
    return bool(env(name, bool, default))


def _dev_secret_key(path: Path) -> str:
    """A random key for local development, created once and kept in an ignored file.

    Written whole to a file of its own, then linked into place: processes started at the same
    moment (the two halves of ``make test``, runserver and its reloader) all read one complete
    key, never an empty or half-written file."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    fd, staged = tempfile.mkstemp(dir=path.parent, prefix=".dev-secret-key.")  # 0600: its owner's only
    try:
        with os.fdopen(fd, "w") as f:
            f.write(get_random_secret_key())
        with contextlib.suppress(FileExistsError):  # another process linked its key first
            os.link(staged, path)
    finally:
        os.unlink(staged)
    return path.read_text().strip()


# Debug is off unless asked for (``make`` and the tests ask for it): a debug error page shows
# the server's settings and environment to whoever triggers it.
DEBUG = _env_bool("DJANGO_DEBUG", False)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "").strip()
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. Set it to a long random value in production "
            "(python -c 'from django.core.management.utils import get_random_secret_key as k; print(k())'), "
            "or set DJANGO_DEBUG=1 for local development."
        )
    SECRET_KEY = _dev_secret_key(BASE_DIR / ".dev-secret-key")
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]
# django-cors-headers: the pages of these origins may call the Agent Protocol and the API with a
# token (x-api-key, Authorization), never with this site's cookies; the SDKs read where a new
# run streams from (Content-Location, Location).
CORS_ALLOWED_ORIGINS = [o for o in os.environ.get("DJANGO_CORS_ALLOWED_ORIGINS", "").split(",") if o]
CORS_URLS_REGEX = r"^/(lg|api)/"
CORS_ALLOW_HEADERS = (*cors_default_headers, "x-api-key")
CORS_EXPOSE_HEADERS = ["Content-Location", "Location"]

# HTTPS hardening, off by default so that plain-HTTP development and tests work; production
# sets them (README, "Security"). ``check --deploy`` is clean with all of them on.
SECURE_SSL_REDIRECT = _env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env("DJANGO_SECURE_HSTS_SECONDS", int, 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = _env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _env_bool("DJANGO_SECURE_COOKIES", False)
if _env_bool("DJANGO_SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_rq",
    "corsheaders",
    "nrllm_agents",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # CORS for the origins DJANGO_CORS_ALLOWED_ORIGINS names (none by default: off), on /lg/ and
    # /api/ only; a preflight is answered here, before any credential is asked for.
    "corsheaders.middleware.CorsMiddleware",
    # NUL characters refused with 400 everywhere; too-large API bodies answered with a JSON 413.
    "nrllm_agents.middleware.EdgeGuardMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # The Content-Security-Policy below, enforced: Django's own middleware from 6.0 on, the app's
    # (the same policy) on 5.2.
    (
        "django.middleware.csp.ContentSecurityPolicyMiddleware"
        if django.VERSION >= (6, 0)
        else "nrllm_agents.middleware.ContentSecurityPolicyMiddleware"
    ),
]

# Every page (the playground, the console, the admin, the API docs) loads its scripts, styles,
# images and fonts from this site only, and no inline script runs ('unsafe-inline' is for
# styles only: the admin's and Swagger UI's inline style attributes). data: images are the
# admin's and Swagger UI's icons. No plugin, no framing, forms post here only.
SECURE_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:"],
    "font-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _private_file(name: str) -> None:
    """Create the SQLite file ``name`` empty and private (0600) before SQLite opens it, so that
    the database (tokens, session keys) and the -wal and -shm files SQLite gives its mode are
    readable by their owner only; an existing one readable by others is made private."""
    if not name or name == ":memory:" or name.startswith("file:"):
        return
    with contextlib.suppress(OSError):  # a read-only place: SQLite itself will say so
        try:
            os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            if os.stat(name).st_mode & 0o077:
                os.chmod(name, 0o600)


def _database(url: str) -> dict:
    config = dj_database_url.parse(url, conn_max_age=0)
    if config["ENGINE"] == "django.db.backends.sqlite3":
        _private_file(str(config["NAME"]))
        # Fences must be atomic on SQLite too: IMMEDIATE takes the write lock at BEGIN, so a
        # read-check-write transaction cannot interleave with another writer. WAL lets readers
        # (the cancellation probe, the stream) proceed while a writer holds the lock.
        config["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        # A file, not :memory:, so that tests can drive other processes against it.
        config["TEST"] = {"NAME": os.environ.get("NRLLM_SQLITE_TEST_NAME") or str(BASE_DIR / "test-db.sqlite3")}
    elif config["ENGINE"] == "django.db.backends.postgresql":
        pool_max = env("NRLLM_DB_POOL_MAX", int, 10)
        if pool_max > 0:
            # One bounded pool per process, shared by all its threads; connections are taken at a
            # step boundary and given back before the next model call (nrllm_agents/db.py).
            # min_size 0: a process that never queries (a forking worker's parent) opens none.
            config.setdefault("OPTIONS", {})["pool"] = {
                "min_size": min(pool_max, env("NRLLM_DB_POOL_MIN", int, 0)),
                "max_size": pool_max,
                "timeout": env("NRLLM_DB_POOL_TIMEOUT", float, 30.0),
            }
    return config


DATABASES = {"default": _database(os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Failed sign-ins are throttled (nrllm_agents.access.signin, NRLLM_SIGN_IN_FAILURES): Django's
# ModelBackend that refuses a username and address past the rate (first, if there are others).
AUTHENTICATION_BACKENDS = ["nrllm_agents.access.ThrottledModelBackend"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = os.environ.get("DJANGO_STATIC_ROOT") or str(BASE_DIR / "staticfiles")
LOGIN_URL = "nrllm_web:login"

REDIS_URL = os.environ.get("REDIS_URL") or None
# Nothing of nrllm_agents counts in the cache (the rate limits count in Redis or in a table that
# ``migrate`` creates: nrllm_agents.admission), so ``migrate`` is all a deploy needs.
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": "nrllm"}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
RQ_QUEUES = {"default": {"URL": REDIS_URL or "redis://127.0.0.1:6379/0", "DEFAULT_TIMEOUT": 360}}
# On SIGTERM a worker hands its run back to the queue at the next step boundary.
RQ = {"WORKER_CLASS": "nrllm_agents.workers.GracefulWorker"}

# Extra tools by environment, e.g. NRLLM_EXTRA_TOOLS="search=myproject.tools.make_search,other=..."
NRLLM_AGENTS: dict = {
    "TOOLS": dict(
        item.strip().split("=", 1) for item in os.environ.get("NRLLM_EXTRA_TOOLS", "").split(",") if "=" in item
    ),
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_RATES": {
        "run_create": os.environ.get("NRLLM_THROTTLE_CREATE", "120/min"),
        "run_cancel": os.environ.get("NRLLM_THROTTLE_CANCEL", "300/min"),
        "tool_list": os.environ.get("NRLLM_THROTTLE_TOOLS", "120/min"),
    },
}

SPECTACULAR_SETTINGS = {
    "TITLE": "nrllm_agents API",
    "DESCRIPTION": "Start, inspect, approve and cancel durable LLM agent runs.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and the docs page are behind authentication like every other endpoint.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The same names the served schema uses (nrllm_agents.api.schema), so that the system checks
    # (``check --deploy`` builds the schema) see one name per shared choice set too.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "nrllm_agents.models.RunStatus",
        "TerminationReasonEnum": "nrllm_agents.models.TerminationReason",
        "CancelSourceEnum": "nrllm_agents.models.CancelSource",
        "ConnectionKindEnum": "nrllm_agents.models.ConnectionKind",
    },
}

# One logging configuration: JSON lines with NRLLM_LOG_FORMAT=json, readable text otherwise.
# Records about a run carry run_id, segment, sequence and event (nrllm_agents.observability.logs).
LOGGING = logging_config(os.environ.get("NRLLM_LOG_FORMAT", "text"), os.environ.get("NRLLM_LOG_LEVEL", "WARNING"))
