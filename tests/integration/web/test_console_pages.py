"""The playground's console pieces (issue 26): the runs list searched, filtered and paged, the
picture fragment the page re-reads while a run runs, and the run page's words (PostgreSQL and SQLite)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.urls import reverse

from nrllm_agents.models import AgentRun, CancelSource, RunStatus
from nrllm_agents.web.runs_list import PER_PAGE

from .test_playground import signed_in, web  # noqa: F401

pytestmark = pytest.mark.django_db

ISO = re.compile(r">[^<]*\d{4}-\d{2}-\d{2}T\d{2}:\d{2}[^<]*<")  # an ISO timestamp as visible text


def visible(page: str) -> str:
    """The page without its ``<script>`` blocks (the run's status as JSON is data, not text)."""
    return re.sub(r"<script.*?</script>", "", page, flags=re.S)


def listed(page: str) -> list[str]:
    return re.findall(r'data-run-id="([0-9a-f-]{36})"', page)


def test_the_runs_list_is_searched_filtered_and_paged(web, runtime, alice, bob):
    ids = [
        runtime.run({"prompt": f"{'apples' if i % 2 else 'pears'} {i}", "script": [{"content": "ok"}]}, owner=alice)
        for i in range(PER_PAGE + 3)
    ]
    runtime.run({"prompt": "apples of bob", "script": [{"content": "ok"}]}, owner=bob)
    client = signed_in(alice)
    url = reverse("nrllm_web:playground")
    first, second = client.get(url).content.decode(), client.get(url, {"page": "2"}).content.decode()
    assert len(listed(first)) == PER_PAGE and len(listed(second)) == 3
    assert set(listed(first)) | set(listed(second)) == {str(r.run_id) for r in ids}  # alice's runs only
    assert 'id="older-runs"' in first and "page 2<" in second and 'id="older-runs"' not in second
    apples = client.get(url, {"q": "APPLES"}).content.decode()
    assert len(listed(apples)) == (PER_PAGE + 3) // 2 and "apples of bob" not in apples
    by_id = client.get(url, {"q": str(ids[0].run_id)[:8]}).content.decode()
    assert listed(by_id) == [str(ids[0].run_id)]
    AgentRun.objects.filter(pk=ids[1].run_id).update(status=RunStatus.FAILED)  # a fixture, not a transition
    failed = client.get(url, {"status": "failed"}).content.decode()
    assert listed(failed) == [str(ids[1].run_id)]
    for odd in ({"page": "999"}, {"page": "x"}, {"status": "nonsense"}, {"q": "x" * 5000}):
        assert client.get(url, odd).status_code == 200  # never a 500
    nothing = client.get(url, {"q": "no such words"}).content.decode()
    assert 'id="no-match"' in nothing


def test_the_runs_list_reads_a_page_of_rows_not_every_run_of_the_user(web, alice):
    """Issue 45: 0.9 s for a search at 100,000 runs of one user. Each query on the run table is
    bounded (a LIMIT), none counts the user's runs whole, none compares ids as text (no index
    serves that), and as many queries answer at 1,000 runs as at 20."""
    fields = {"provider": "scripted", "status": RunStatus.COMPLETED, "owner": alice}

    def reads(params: dict[str, str]) -> list[str]:
        sqls: list[str] = []
        with connection.execute_wrapper(lambda execute, sql, *args: sqls.append(sql) or execute(sql, *args)):
            html = signed_in(alice).get(reverse("nrllm_web:playground"), params).content.decode()
        assert len(listed(html)) == PER_PAGE
        return [sql for sql in sqls if 'FROM "nrllm_agents_agentrun"' in sql]

    AgentRun.objects.bulk_create(AgentRun(prompt=f"order #{i}", **fields) for i in range(20))
    small = {key: reads(params) for key, params in (("list", {}), ("search", {"q": "order"}))}
    AgentRun.objects.bulk_create(AgentRun(prompt=f"order #{i}", **fields) for i in range(20, 1000))
    for key, params in (("list", {}), ("search", {"q": "order"}), ("page", {"q": "order", "page": "3"})):
        sqls = reads(params)
        assert key == "page" or len(sqls) == len(small[key])
        for sql in sqls:
            assert " LIMIT " in sql, sql
            assert '"id"::text' not in sql, sql


def test_the_picture_fragment_is_the_run_page_picture_for_those_who_may_see_the_run(web, runtime, alice, bob):
    result = runtime.run(
        {
            "prompt": "p",
            "tools": ["calculator"],
            "script": [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1/0"}}]}, {"content": "x"}],
        },
        owner=alice,
    )
    url = reverse("nrllm_web:run-picture", args=[result.run_id])
    response = signed_in(alice).get(url)
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    fragment = response.content.decode()
    assert fragment.lstrip().startswith("<figure") and 'id="gantt"' in fragment
    assert 'class="bar bar-error"' in fragment and 'href="#step-' in fragment  # bars lead to their steps
    assert signed_in(bob).get(url).status_code == 404


def test_the_run_page_marks_errors_shows_times_once_and_the_final_answer_once(web, runtime, alice):
    result = runtime.run(
        {
            "prompt": "p",
            "tools": ["calculator"],
            "script": [
                {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1/0"}}]},
                {"content": "the one answer"},
            ],
        },
        owner=alice,
    )
    page = signed_in(alice).get(reverse("nrllm_web:run", args=[result.run_id])).content.decode()
    assert 'class="step kind-tool failed"' in page and ">tool error<" in page
    assert page.count('class="see-answer"') == 1  # the final answer's card links to the outcome
    assert '<p class="final">the one answer</p>' in page
    assert not ISO.search(visible(page)), ISO.search(visible(page))


def test_a_cancel_reads_to_the_millisecond(web, runtime, alice):
    def observe(step):
        if step["kind"] == "llm":
            runtime.cancel(step["run_id"], by=alice, source=CancelSource.PLAYGROUND)

    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1"}}]}, {"content": "x"}]
    result = runtime.run({"prompt": "p", "tools": ["calculator"], "script": script}, owner=alice, on_step=observe)
    page = signed_in(alice).get(reverse("nrllm_web:run", args=[result.run_id])).content.decode()
    assert re.search(r"Cancelled by alice via playground at \d\d:\d\d:\d\d\.\d{3} UTC; stopped \d+ ms later\.", page)
    assert not ISO.search(visible(page)), ISO.search(visible(page))
