"""``manage.py agent_budgets``: set, list and delete the budgets shared by many runs."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from nrllm_agents.catalog import budgets
from nrllm_agents.management import console
from nrllm_agents.models import Budget, BudgetWindow
from nrllm_agents.web.display import absolute

SCOPES = ("user", "group", "agent")


def _subject(parser: CommandParser, *, required: bool = True) -> None:
    who = parser.add_mutually_exclusive_group(required=required)
    who.add_argument("--user", metavar="USERNAME", help="The budget of this user's runs.")
    who.add_argument("--group", metavar="NAME", help="The budget of the runs of this group's members (a team).")
    who.add_argument("--agent", metavar="NAME", help="The budget of the runs started from this saved agent.")
    who.add_argument("--everyone", action="store_true", help="The budget of every run.")


def _scope(options: dict[str, Any]) -> tuple[str, str | None]:
    for scope in SCOPES:
        if options.get(scope):
            return scope, options[scope]
    return "everyone", None


class Command(BaseCommand):
    help = (
        "Set, list or delete budgets: ceilings on the cost (in the currency of the prices), the tokens "
        "and the runs of a user, a group, a saved agent or everyone, per day or month (calendar "
        "boundaries in TIME_ZONE) or in total. A run is refused when a budget covering it has nothing "
        "left, and stopped (budget_exhausted) before a model call that does not fit. Exit status 2 for "
        "bad input."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        put = sub.add_parser("set", help="Create or change a budget (its spend so far is kept).")
        _subject(put)
        put.add_argument("--window", required=True, choices=BudgetWindow.values, help="How long spend counts.")
        put.add_argument("--cost", metavar="AMOUNT", help="The ceiling on cost, in the currency of the prices.")
        put.add_argument("--tokens", metavar="N", help="The ceiling on tokens (prompt and completion).")
        put.add_argument("--runs", metavar="N", help="The ceiling on runs started.")
        listing = sub.add_parser("list", help="List budgets with their spend, reservations and what is left.")
        listing.add_argument("--json", action="store_true", help="One JSON object per line.")
        drop = sub.add_parser("delete", help="Delete a subject's budgets (of one window with --window).")
        _subject(drop)
        drop.add_argument("--window", choices=BudgetWindow.values, help="Only this window's budget.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            getattr(self, f"_{options['action']}")(options)
        except budgets.BudgetProblem as exc:
            raise console.usage_error(str(exc)) from None

    def _set(self, options: dict[str, Any]) -> None:
        scope, name = _scope(options)
        budget, created = budgets.set_budget(
            scope,
            name,
            options["window"],
            max_cost=options["cost"],
            max_tokens=options["tokens"],
            max_runs=options["runs"],
        )
        self.stdout.write(
            self.style.SUCCESS(f"{'created' if created else 'changed'} budget {budget.pk}: {_line(budget)}")
        )

    def _list(self, options: dict[str, Any]) -> None:
        for budget in Budget.objects.select_related("user", "group", "agent"):
            self.stdout.write(json.dumps(budgets.as_dict(budget)) if options["json"] else _line(budget))

    def _delete(self, options: dict[str, Any]) -> None:
        scope, name = _scope(options)
        gone = budgets.delete(scope, name, options["window"])
        if not gone:
            raise console.usage_error("no such budget")
        self.stdout.write(self.style.SUCCESS(f"deleted {gone} budget{'s' if gone != 1 else ''}"))


def _line(budget: Budget) -> str:
    """One budget in words: its subject and window, then each ceiling with its use."""
    d = budgets.as_dict(budget)
    parts = []
    if d["max_cost"] is not None:
        parts.append(f"cost {d['spent_cost']} spent, {d['reserved_cost']} reserved of {d['max_cost']} {d['currency']}")
    if d["max_tokens"] is not None:
        parts.append(f"tokens {d['spent_tokens']} spent, {d['reserved_tokens']} reserved of {d['max_tokens']}")
    if d["max_runs"] is not None:
        parts.append(f"runs {d['runs']} of {d['max_runs']}")
    resets = f"resets at {absolute(d['resets_at'])}" if d["resets_at"] else "never resets"
    return console.terminal_safe(f"{budget}: {'; '.join(parts)}; {resets}")
