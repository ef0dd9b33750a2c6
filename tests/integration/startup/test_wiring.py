"""The process is wired in one visible place: ``AppConfig.ready()``. Importing every module of
the package installs nothing: no listener client, no boundary hook, no job for the in-process
executor, no system check."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.processes  # the probe runs in a fresh Python process

PROBE = r"""
import importlib, os, pkgutil, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")
import django
from nrllm_agents.apps import NrllmAgentsConfig
real_ready = NrllmAgentsConfig.ready
NrllmAgentsConfig.ready = lambda self: None  # the app loads; its wiring waits
django.setup()
import nrllm_agents
from django.core.checks.registry import registry

def ours():
    return sorted(c.__name__ for c in registry.get_checks(include_deployment_checks=True)
                  if c.__module__.startswith("nrllm_agents"))

def wired():
    from nrllm_agents.executors import LOCAL
    from nrllm_agents.live.listener import listener
    from nrllm_agents.store import leases
    return {"clients": [type(c).__name__ for c in listener._clients],
            "on_boundary": leases.on_boundary is not None,
            "job": getattr(LOCAL, "job", None) is not None, "checks": ours()}

for info in pkgutil.walk_packages(nrllm_agents.__path__, "nrllm_agents."):
    if ".migrations" not in info.name:
        importlib.import_module(info.name)
print(wired())
real_ready(django.apps.apps.get_app_config("nrllm_agents"))
real_ready(django.apps.apps.get_app_config("nrllm_agents"))  # twice: nothing doubles
print(wired())
"""


def test_no_module_wires_the_process_at_import_only_ready_does():
    ran = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    before, after = (eval(line) for line in ran.stdout.strip().splitlines()[-2:])  # noqa: S307 (our own repr)
    assert before == {"clients": [], "on_boundary": False, "job": False, "checks": []}
    assert after["clients"] == ["CancelWatcher", "Hub", "Publisher"]  # the cancel watcher first
    assert after["on_boundary"] and after["job"]
    assert after["checks"] == [
        "check_connection_keys",
        "check_deploy_database",
        "check_extras",
        "check_host",
        "check_mcp_servers",
        "check_settings",
        "check_stream_capacity",
        "check_tool_names",
        "check_tracing",
        "check_transactional_tools",
    ]
