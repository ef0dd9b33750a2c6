"""Acceptance: a host project follows docs/quickstart.md with the sdist, and everything works under
its prefix with nothing else set (SQLite, the in-process executor, no Redis).

A fresh ``startproject`` in a fresh virtualenv; the app added to ``INSTALLED_APPS`` and mounted at
``agents/``; a host app with an ``agent_tools.py`` whose ``@tool`` writes a file; ``migrate``;
``runserver``. Then, over real HTTP: sign in, the playground, the API's docs and schema, the
admin and the queue dashboard; a run through ``agents/api/runs/`` that calls the host's tool, and
a second run cancelled in flight.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.processes import wait_for
from tests.e2e.web.servers import free_port

from . import quickstart as qs

PASSWORD = "a long quickstart password"


@dataclass
class Site:
    root: Path
    base: str
    token: str
    log: Path


def _env(root: Path) -> dict[str, str]:
    """Nothing of ours set: no settings module, database, Redis or NRLLM_* variable leaks in."""
    return {"PATH": os.environ["PATH"], "HOME": str(root), "LANG": "C.UTF-8"}


def _run(python: Path, command: str, root: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    argv = command.split()
    assert argv[0] == "python"
    done = subprocess.run(
        [str(python), *argv[1:], *extra], cwd=root, env={**_env(root), **(env or {})}, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def site(host_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("host-project")
    _run(host_python, qs.STARTPROJECT, root)
    with open(root / "mysite" / "settings.py", "a") as f:
        f.write("\n" + qs.SETTINGS)
    with open(root / "mysite" / "urls.py", "a") as f:
        f.write("\n" + qs.URLS)
    _run(host_python, qs.STARTAPP, root)
    with open(root / "mysite" / "settings.py", "a") as f:
        f.write("\n" + qs.HOST_APP + "\n" + qs.CORS)
    (root / "notes" / "agent_tools.py").write_text(qs.AGENT_TOOLS)

    _run(host_python, qs.MIGRATE, root)
    _run(
        host_python,
        qs.CREATESUPERUSER,
        root,
        "--noinput",
        "--username",
        "admin",
        "--email",
        "admin@example.com",
        env={"DJANGO_SUPERUSER_PASSWORD": PASSWORD},
    )
    checked = _run(host_python, "python manage.py check", root)
    assert "nrllm_agents." not in checked, checked  # no error or warning of ours
    # check --deploy generates the host's schema with the host's REST settings (none here): the
    # app's own views carry their inspector, so no error comes from the app or the libraries it
    # brings in (drf_spectacular.E001 did); the only error left is Django's own note on
    # startproject's console mailer (6.1), beside its warnings on DEBUG, the key and HTTPS
    deploy = subprocess.run(
        [str(host_python), "manage.py", "check", "--deploy"], cwd=root, env=_env(root), capture_output=True, text=True
    )
    issues = re.findall(r"\((\w+(?:\.\w+)*\.[EW]\d+)\)", deploy.stdout + deploy.stderr)
    assert "security.W018" in issues, deploy.stderr  # it ran the deploy checks
    assert [i for i in issues if ".E" in i and i != "mail.E001"] == [], deploy.stderr
    token = re.search(r"token (\w+) for", _run(host_python, "python manage.py drf_create_token admin", root))
    assert token, "drf_create_token printed no token"
    with serving(host_python, root, qs.RUNSERVER) as (base, log, _):
        yield Site(root, base, token.group(1), log)


@contextmanager
def serving(
    python: Path, root: Path, command: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    """``command`` (runserver, or a worker: then it has no address to wait for) running in the
    host project until the block ends; yields its base URL, its log and its process."""
    port = free_port()
    log = root / f"{command.split()[2]}.log"
    argv = [str(python), *command.split()[1:]]
    if command == qs.RUNSERVER:
        argv += ["--noreload", f"127.0.0.1:{port}"]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            argv, cwd=root, env={**_env(root), **(env or {})}, stdout=out, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while command == qs.RUNSERVER:
            try:
                requests.get(base + "/admin/login/", timeout=2)
                break
            except requests.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"{command} did not come up:\n" + log.read_text()[-3000:])
                time.sleep(0.2)
        yield base, log, process
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Client(requests.Session):
    """A session whose paths are relative to ``base``."""

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", 30)
        return super().request(method, self.base + str(url), *args, **kwargs)


@pytest.fixture
def browser(site: Site) -> Iterator[Client]:
    """A signed-in session, by the app's own sign-in page under the prefix."""
    with Client(site.base) as client:
        page = client.get("/agents/playground/")
        assert page.url == site.base + "/agents/accounts/login/?next=/agents/playground/", page.url
        csrf = client.cookies["csrftoken"]
        signed = client.post(
            "/agents/accounts/login/",
            data={
                "username": "admin",
                "password": PASSWORD,
                "csrfmiddlewaretoken": csrf,
                "next": "/agents/playground/",
            },
            headers={"Referer": site.base + "/agents/accounts/login/"},
        )
        assert signed.status_code == 200 and signed.url == site.base + "/agents/playground/", signed.text[-2000:]
        yield client


@pytest.fixture
def api(site: Site) -> Iterator[Client]:
    with Client(site.base + "/agents/api/") as client:
        client.headers["Authorization"] = f"Token {site.token}"
        yield client


def test_the_quickstart_page_says_what_the_test_does() -> None:
    page = qs.DOC.read_text()
    for text in (
        qs.INSTALL_CHECKOUT,
        qs.MAKE_DIST,
        qs.INSTALL_WHEEL,
        qs.STARTPROJECT,
        qs.MIGRATE,
        qs.CREATESUPERUSER,
        qs.RUNSERVER,
        qs.SETTINGS,
        qs.URLS,
        qs.STARTAPP,
    ):
        assert text in page, text
    assert qs.HOST_APP in page and qs.AGENT_TOOLS in page
    assert qs.CORS in qs.CORS_DOC.read_text()
    readme = (qs.DOC.parents[1] / "README.md").read_text()
    assert qs.INSTALL_CHECKOUT in readme and "make dist" in readme


def test_the_pages_work_under_the_prefix(site: Site, browser: Client) -> None:
    playground = browser.get("/agents/playground/")
    assert playground.status_code == 200
    # every link of ours on the page is under the prefix (none assumes /api/ or /playground/ at the root)
    links = re.findall(r'(?:href|action|src|data-[\w-]+-url)="(/[^"]*)"', playground.text)
    assert links and all(link.startswith(("/agents/", "/static/", "/admin/")) for link in links), links
    assert browser.get("/static/nrllm_agents/playground.js").status_code == 200
    docs = browser.get("/agents/api/docs/")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    schema = browser.get("/agents/api/schema/", headers={"Accept": "application/json"})
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/agents/api/runs/" in paths and "/agents/api/runs/{id}/stream/" in paths, sorted(paths)
    assert browser.get("/admin/nrllm_agents/agentrun/").status_code == 200
    assert browser.get("/agents/queues/").status_code == 200


def test_a_chat_ui_on_the_configured_origin_gets_its_preflight_and_info(site: Site) -> None:
    """docs/agent-protocol.md's CORS settings in the host project: a preflight under the prefix is
    answered without credentials for the UI's origin only, and ``lg/info`` needs none."""
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-api-key"}
    url = site.base + "/agents/lg/threads"
    allowed = requests.options(url, headers={"Origin": "http://localhost:5173", **preflight}, timeout=30)
    assert allowed.status_code == 200 and allowed.headers["Access-Control-Allow-Origin"] == "http://localhost:5173"
    other = requests.options(url, headers={"Origin": "http://elsewhere.example", **preflight}, timeout=30)
    assert "Access-Control-Allow-Origin" not in other.headers
    info = requests.get(site.base + "/agents/lg/info", timeout=30)
    assert info.status_code == 200 and info.json()["flags"]["assistants"] is True


def test_a_run_calls_the_host_tool_and_a_second_is_cancelled_in_flight(site: Site, api: Client) -> None:
    tools = {t["name"]: t for t in api.get("tools/").json()["tools"]}
    assert tools["save_note"]["source"] == "app", sorted(tools)

    script = [
        {"tool_calls": [{"name": "save_note", "arguments": {"title": "hello", "text": "hi ", "copies": "x"}}]},
        {"tool_calls": [{"name": "save_note", "arguments": {"title": "hello", "text": "hi ", "copies": 2}}]},
        {"content": "saved it"},
    ]
    created = api.post("runs/", json={"prompt": "save a note", "tools": ["save_note"], "script": script})
    assert created.status_code == 202, created.text
    run_id = created.json()["run_id"]
    run = wait_for(
        what="the run to complete",
        predicate=lambda: (r := api.get(f"runs/{run_id}/").json())["status"] == "completed" and r,
    )
    assert run["final_text"] == "saved it"
    assert (site.root / "notes-out" / "hello.txt").read_text() == "hi hi "
    steps = api.get(f"runs/{run_id}/events/", params={"limit": 1000}).json()["results"]
    tool_steps = [s for s in steps if s["kind"] == "tool"]
    # the model's bad argument went back to it as a tool error; the second call wrote the file
    assert "invalid arguments for save_note: copies" in str(tool_steps[0]["payload"])
    assert "saved notes-out/hello.txt" in str(tool_steps[1]["payload"])

    long = [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.3}}]} for _ in range(40)] + [{"content": "x"}]
    second = api.post("runs/", json={"prompt": "wait", "tools": ["sleep"], "script": long, "max_iterations": 50})
    assert second.status_code == 202, second.text
    second_id = second.json()["run_id"]
    events = cancel_in_flight(api, second_id, once_recorded="tool")
    assert events[-1]["kind"] == "cancelled" and sum(e["kind"] == "tool" for e in events) < 40


def cancel_in_flight(api: Client, run_id: str, *, once_recorded: str) -> list[dict[str, Any]]:
    """Cancel ``run_id`` once it recorded a step of kind ``once_recorded``, as the admin, and wait
    for its stop; asserts the cancel record, and returns the run's steps."""
    wait_for(
        what=f"the run to record a {once_recorded} step",
        predicate=lambda: any(e["kind"] == once_recorded for e in api.get(f"runs/{run_id}/events/").json()["results"]),
    )
    cancel = api.post(f"runs/{run_id}/cancel/", json={"reason": "enough"})
    assert cancel.status_code == 202, cancel.text
    stopped = wait_for(
        what="the cancel to be acknowledged",
        predicate=lambda: (r := api.get(f"runs/{run_id}/").json())["cancel"] and r["cancel"]["stopped_at"] and r,
    )
    assert (stopped["status"], stopped["cancel"]["by"], stopped["cancel"]["reason"]) == ("cancelled", "admin", "enough")
    return api.get(f"runs/{run_id}/events/", params={"limit": 1000}).json()["results"]


def test_the_quickstart_s_curl_starts_a_run_as_written(host_python: Path, site: Site, api: Client) -> None:
    """Step 7's block, taken from docs/quickstart.md as written (it sets ``$TOKEN`` itself), in
    the project with its virtualenv first on ``PATH``, and this server's address for
    ``127.0.0.1:8000``."""
    page = qs.DOC.read_text()
    block = page[page.index("## 7.") :].split("```bash\n", 1)[1].split("```", 1)[0]
    assert block.startswith("TOKEN=$(python manage.py drf_create_token admin"), block
    command = "set -eo pipefail\n" + block.replace("http://127.0.0.1:8000", site.base)
    env = {**_env(site.root), "PATH": f"{host_python.parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", command], cwd=site.root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    run = wait_for(
        what="the run to complete",
        predicate=lambda: (r := api.get(f"runs/{run_id}/").json())["status"] in ("completed", "failed") and r,
    )
    assert (run["status"], run["final_text"]) == ("completed", "saved"), run
