"""``STREAM_MAX_OPEN`` follows what the server can hold (issue 44, item 11): half of gunicorn's
threads when they can be read, a warning (W014) for a number set at or above them.

Before: the default was 1,000 streams against gunicorn's 32 threads; 70 open streams left other
users' requests unanswered.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from nrllm_agents.admission import capacity as server
from nrllm_agents.admission import slots
from nrllm_agents.checks import check_stream_capacity

GUNICORN = ["/srv/.venv/bin/gunicorn"]


@pytest.mark.parametrize(
    ("argv", "environ", "threads"),
    [
        ([*GUNICORN, "-k", "gthread", "--threads", "32", "config.wsgi"], {}, 32),
        ([*GUNICORN, "--threads=8", "config.wsgi"], {}, 8),
        (["/srv/.venv/lib/python3.13/site-packages/gunicorn/__main__.py", "--threads", "6", "config.wsgi"], {}, 6),
        ([*GUNICORN, "config.wsgi"], {"GUNICORN_CMD_ARGS": "--threads 12 -k gthread"}, 12),
        ([*GUNICORN, "--threads", "4", "config.wsgi"], {"GUNICORN_CMD_ARGS": "--threads 12"}, 4),  # the line wins
        (["manage.py", "runserver"], {"GUNICORN_CMD_ARGS": "--threads 6"}, 6),
        ([*GUNICORN, "config.wsgi"], {}, 1),  # gunicorn's default: one thread (sync workers)
        ([*GUNICORN, "-k", "uvicorn.workers.UvicornWorker", "config.asgi"], {}, None),  # no thread per request
        (["manage.py", "runserver"], {}, None),
        (["uvicorn", "config.asgi:application"], {}, None),
    ],
)
def test_gunicorn_s_threads_are_read_from_its_command_line_and_environment(
    argv, environ, threads, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # no ./gunicorn.conf.py here
    assert server.gunicorn_threads(argv, environ) == threads


def test_a_literal_threads_in_gunicorn_s_configuration_file_is_read_never_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gunicorn.conf.py").write_text("import os\nworker_class = 'gthread'\nthreads = 24\n")
    assert server.gunicorn_threads([*GUNICORN, "config.wsgi"], {}) == 24
    (tmp_path / "other.py").write_text("threads = int('9')\nraise SystemExit('never executed')\n")
    assert server.gunicorn_threads([*GUNICORN, "-c", "other.py", "config.wsgi"], {}) == 1  # computed: not read
    assert server.gunicorn_threads([*GUNICORN, "-c", "other.py", "--threads", "10", "config.wsgi"], {}) == 10


def warnings(**nrllm: object) -> list[str]:
    with override_settings(NRLLM_AGENTS=nrllm):
        return [m.id for m in check_stream_capacity()]


def test_streams_default_to_half_the_threads_and_a_number_past_them_is_warned(monkeypatch):
    monkeypatch.setattr(server.sys, "argv", ["manage.py", "check"])
    monkeypatch.delenv("GUNICORN_CMD_ARGS", raising=False)
    with override_settings(NRLLM_AGENTS={"SERVER_THREADS": 32}):
        assert server.stream_max_open() == 16
    with override_settings(NRLLM_AGENTS={}):
        assert server.stream_max_open() == server.DEFAULT_STREAM_MAX_OPEN == 16  # threads not known
    monkeypatch.setenv("GUNICORN_CMD_ARGS", "--threads 10")
    with override_settings(NRLLM_AGENTS={}):
        assert server.stream_max_open() == 5
    assert warnings() == []
    assert warnings(STREAM_MAX_OPEN=9) == []
    assert warnings(STREAM_MAX_OPEN=10) == ["nrllm_agents.W014"]
    assert warnings(STREAM_MAX_OPEN=1000, SERVER_THREADS=32) == ["nrllm_agents.W014"]
    assert warnings(STREAM_MAX_OPEN=0, SERVER_THREADS=32) == ["nrllm_agents.W014"]  # no bound at all
    monkeypatch.delenv("GUNICORN_CMD_ARGS")
    assert warnings(STREAM_MAX_OPEN=1000) == []  # threads not known: nothing to compare


def test_the_process_refuses_the_stream_past_half_its_threads():
    # streams another test of this process left open count too: the bound is above them
    already = slots.in_use(slots.Kind.STREAM)[0]
    threads = 2 * (already + 3)
    with override_settings(NRLLM_AGENTS={"SERVER_THREADS": threads, "STREAM_MAX_PER_USER": 0}):
        held = [slots.hold(slots.Kind.STREAM, f"user-{user}") for user in range(4)]
        try:
            assert [isinstance(h, slots.Slot) for h in held] == [True, True, True, False]
            assert f"{already + 3} at most" in held[3].detail  # type: ignore[union-attr]
        finally:
            for h in held:
                if isinstance(h, slots.Slot):
                    h.release()
