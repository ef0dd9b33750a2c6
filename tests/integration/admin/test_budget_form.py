"""The admin's budget form reads its ceilings with the parser the API and ``agent_budgets`` use
(``catalog.budgets.parse_ceiling``, ``money.parsing``): what they refuse, it refuses with a
message on the form; nothing it is sent is a server error."""

from __future__ import annotations

import itertools
import random

import pytest

from nrllm_agents.models import Budget

pytestmark = pytest.mark.django_db

ADD = "/admin/nrllm_agents/budget/add/"
LOOKALIKES = ["１２", "١٢", "5\xa0", "1_0", " 12", "12 ", "+12", "-1", "1e3", "0x10", "1.5", "12\u200b", "²"]


@pytest.mark.parametrize("field", ["max_tokens", "max_runs"])
@pytest.mark.parametrize("text", LOOKALIKES)
def test_a_number_the_api_refuses_is_a_form_error(admin_client, field, text):
    page = admin_client.post(ADD, {"scope": "everyone", "window": "day", field: text})
    assert page.status_code == 200  # the form again, with its message
    assert "must be a whole number (ASCII digits)" in page.content.decode()
    assert not Budget.objects.exists()


def test_plain_digits_are_taken(admin_client):
    saved = admin_client.post(ADD, {"scope": "everyone", "window": "day", "max_tokens": "12", "max_runs": "0"})
    assert saved.status_code == 302
    assert Budget.objects.values_list("max_tokens", "max_runs").get() == (12, 0)


def test_a_fuzz_of_the_form_is_a_page_or_a_redirect_never_a_server_error(admin_client):
    texts = [*LOOKALIKES, "", "12", "0", "9" * 16, "9" * 40, "2147483648", "NaN", "Infinity", "1e400", "٫5", "\x85"]
    scopes = ["everyone", "user", "group", "agent", "nobody", ""]
    pick = random.Random(44)
    cases = list(itertools.product(texts, ["max_tokens", "max_runs", "max_cost"]))
    for text, field in cases:
        scope = pick.choice(scopes)
        window = pick.choice(["day", "month", "total", "week", ""])
        page = admin_client.post(ADD, {"scope": scope, "window": window, field: text})
        assert page.status_code in (200, 302), (scope, window, field, text, page.status_code)
        Budget.objects.all().delete()
