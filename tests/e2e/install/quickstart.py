"""The quickstart of docs/quickstart.md, as the end-to-end test follows it: each command and each
snippet here appears verbatim in that page (``test_the_quickstart_page_says_what_the_test_does``)."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "quickstart.md"

# the install: from a checkout (test_host_workers.py installs it so), or what `make dist` builds
# (conftest.py runs it; the quickstart's virtualenv installs the sdist, test_wheel.py reads the wheel)
INSTALL_CHECKOUT = "pip install path/to/checkout"
MAKE_DIST = "make dist"
INSTALL_WHEEL = "pip install dist/nrllm_agents-*.whl"

# shell commands, after the install
STARTPROJECT = "python -m django startproject mysite ."
MIGRATE = "python manage.py migrate"
CREATESUPERUSER = "python manage.py createsuperuser"
RUNSERVER = "python manage.py runserver"

SETTINGS = """\
INSTALLED_APPS += [
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_rq",
    "nrllm_agents",
]
# NUL characters refused everywhere, oversized API bodies answered 413 (right after SecurityMiddleware)
MIDDLEWARE.insert(1, "nrllm_agents.middleware.EdgeGuardMiddleware")
"""

URLS = """\
from django.urls import include

urlpatterns += [path("agents/", include("nrllm_agents.urls"))]
"""

# a host app with a typed tool, found at start-up with no settings edit
STARTAPP = "python manage.py startapp notes"
HOST_APP = """\
INSTALLED_APPS += ["notes"]
"""
AGENT_TOOLS = '''\
from pathlib import Path

from nrllm_agents import tool


@tool
def save_note(title: str, text: str, copies: int = 1) -> str:
    """Save a note to a file in the notes folder.

    Args:
        title: the file's name, without a folder
        text: what the note says
        copies: how many times the text is written
    """
    path = Path("notes-out") / f"{Path(title).name}.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text * copies)
    return f"saved {path}"
'''

# docs/operations/workers.md: the same host project on PostgreSQL (`nrllm-agents[postgres]`) with
# Redis and RQ workers
WORKERS = """\
import os

REDIS_URL = os.environ.get("REDIS_URL")
if REDIS_URL:
    RQ_QUEUES = {"default": {"URL": REDIS_URL, "DEFAULT_TIMEOUT": 360}}
    # on SIGTERM a worker hands its run back to the queue at the next step boundary
    RQ = {"WORKER_CLASS": "nrllm_agents.workers.GracefulWorker"}
"""
WORKERS_DOC = DOC.parent / "operations" / "workers.md"
RQWORKER = "python manage.py rqworker default"
INSTALL_CHECKOUT_POSTGRES = 'pip install "path/to/checkout[postgres]"'

# docs/agent-protocol.md, "A chat UI on another origin": CORS for the UI's origin (the quickstart's
# project adds it; the test sends a preflight under agents/lg/)
CORS_DOC = DOC.parent / "agent-protocol.md"
CORS = """\
from corsheaders.defaults import default_headers

INSTALLED_APPS += ["corsheaders"]
MIDDLEWARE.insert(0, "corsheaders.middleware.CorsMiddleware")
CORS_ALLOWED_ORIGINS = ["http://localhost:5173"]  # the UI's origin, exactly
CORS_URLS_REGEX = r"^/agents/lg/"  # the protocol only (under the prefix of nrllm_agents.urls)
CORS_ALLOW_HEADERS = (*default_headers, "x-api-key")  # the SDKs' api_key
CORS_EXPOSE_HEADERS = ["Content-Location", "Location"]  # where a new run streams from
"""
