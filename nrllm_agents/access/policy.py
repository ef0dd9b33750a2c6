"""Who may see, stream, cancel, approve, bulk-cancel and start a run, and which saved agents
and connections a user may start one with: the one rule.

Every surface (REST API, playground, admin, the browser stream) asks this module and only
translates its answer into HTTP, HTML or a message. The table of who may do what is in
docs/operations/security.md ("Who may do what"); ``tests/integration/access/test_policy_matrix.py``
checks that table, this module and every surface against each other.

Seeing another user's run takes ``is_staff``; acting on it takes, in addition, the dedicated
permission (superusers hold every permission). A run the caller may not see is "not found"
on every surface; a run the caller sees but may not act on is "forbidden". The admin site is
for staff only (Django's admin login), so there the rule applies to staff.
"""

from __future__ import annotations

import enum
from typing import Any

from django.conf import settings
from django.db.models import Exists, OuterRef, QuerySet

from ..conf import app_settings
from ..domain.errors import Kind, KindedError
from ..models import Agent, AgentRun, Connection, Named, Thread

CANCEL_PERMISSION = "nrllm_agents.cancel_agentrun"
APPROVE_PERMISSION = "nrllm_agents.approve_agentrun"


class Action(enum.StrEnum):
    """What a caller wants to do with a run."""

    SEE = "see"
    STREAM = "stream"
    CANCEL = "cancel"
    APPROVE = "approve"
    BULK_CANCEL = "bulk_cancel"
    START = "start"
    POST_MESSAGE = "post_message"  # to a thread: its owner only (a message speaks for them)


class Verdict(enum.StrEnum):
    """The policy's answer: allowed, or refused as forbidden (visible) or not found (hidden)."""

    ALLOWED = "allowed"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    UNAUTHENTICATED = "unauthenticated"


_PERMISSION = {
    Action.CANCEL: CANCEL_PERMISSION,
    Action.BULK_CANCEL: CANCEL_PERMISSION,
    Action.APPROVE: APPROVE_PERMISSION,
}


def authenticated(user: Any) -> bool:
    """A signed-in, active user (``AnonymousUser`` and ``None`` are not)."""
    return bool(getattr(user, "is_authenticated", False) and getattr(user, "is_active", True))


def may_list_tools(user: Any) -> bool:
    """Whether ``user`` may see which tools a run can be offered (anyone who may start a run)."""
    return authenticated(user)


def sees_all(user: Any) -> bool:
    """Whether ``user`` sees every user's runs (staff)."""
    return authenticated(user) and bool(user.is_staff)


def may_use_admin(user: Any) -> bool:
    """The admin site lets staff in (Django's own gate); the runs admin then asks this policy."""
    return sees_all(user)


def may_read_metrics(user: Any) -> bool:
    """``/metrics`` for a signed-in user: staff (a scraper uses the bearer token instead)."""
    return sees_all(user)


def may_manage_queues(user: Any) -> bool:
    """The django-rq dashboard (empty queues, delete and requeue jobs): superusers only."""
    return authenticated(user) and bool(user.is_superuser)


def acts_on_all(user: Any, action: Action) -> bool:
    """Whether ``user`` may do ``action`` to other users' runs: staff holding its permission."""
    permission = _PERMISSION.get(action)
    return permission is not None and sees_all(user) and user.has_perm(permission)


def visible_runs(user: Any) -> QuerySet[AgentRun]:
    """The runs ``user`` may see and stream: all for staff, their own otherwise, none for anonymous."""
    runs = AgentRun.objects.select_related("owner", "cancelled_by")
    if not authenticated(user):
        return runs.none()
    return runs if sees_all(user) else runs.filter(owner=user)


def visible_threads(user: Any) -> QuerySet[Thread]:
    """The threads ``user`` may see (and see the runs of): like runs, all for staff, their own
    otherwise, none for anonymous. A thread's runs are visible to whoever sees the thread
    only through it; each run still answers to ``visible_runs``."""
    threads = Thread.objects.select_related("owner")
    if not authenticated(user):
        return threads.none()
    return threads if sees_all(user) else threads.filter(owner=user)


def actionable_runs(user: Any, action: Action, runs: QuerySet[AgentRun] | None = None) -> QuerySet[AgentRun]:
    """Of ``runs`` (default: all), those ``user`` may ``action``: own runs, or all with the permission."""
    runs = AgentRun.objects.all() if runs is None else runs
    if not authenticated(user):
        return runs.none()
    if action in (Action.SEE, Action.STREAM):
        return runs if sees_all(user) else runs.filter(owner=user)
    return runs if acts_on_all(user, action) else runs.filter(owner=user)


def verdict(user: Any, action: Action, run: AgentRun | Thread | None = None) -> Verdict:
    """The answer for one caller, action and run or thread (``None`` for ``start`` and
    ``bulk_cancel``). A thread is owned like a run; ``post_message`` is its owner's alone.

    A run ``user`` may not see is ``NOT_FOUND`` whatever the action, so that refusing never
    tells whether a run exists (so is ``None`` for an action on a run); a visible run the
    caller may not act on is ``FORBIDDEN``.
    ``bulk_cancel`` is allowed to every signed-in user: the selection is then narrowed with
    ``actionable_runs``.
    """
    if not authenticated(user):
        return Verdict.UNAUTHENTICATED
    if action in (Action.START, Action.BULK_CANCEL):
        return Verdict.ALLOWED
    if run is None:
        return Verdict.NOT_FOUND
    owner = run.owner_id is not None and run.owner_id == user.pk
    if not (owner or sees_all(user)):
        return Verdict.NOT_FOUND
    if action in (Action.SEE, Action.STREAM) or owner or acts_on_all(user, action):
        return Verdict.ALLOWED
    return Verdict.FORBIDDEN


def may(user: Any, action: Action, run: AgentRun | Thread | None = None) -> bool:
    """Shorthand: ``verdict(...) is ALLOWED``."""
    return verdict(user, action, run) == Verdict.ALLOWED


REFUSALS = {
    Action.CANCEL: "You may not cancel this run: it is not yours and you lack the cancel permission.",
    Action.APPROVE: "You may not approve or deny this run: it is not yours and you lack the approve permission.",
    Action.POST_MESSAGE: "You may not post to this thread: it is not yours.",
}


TEST_DOUBLE_PROVIDERS = frozenset({"scripted"})  # plays a script the caller wrote: a test double


def test_doubles_allowed() -> bool:
    """Whether users of the API and the playground may start runs on a test double: as
    ``NRLLM_AGENTS["ALLOW_SCRIPTED"]`` says, else only in development (``DEBUG``)."""
    allowed = app_settings.ALLOW_SCRIPTED
    return bool(settings.DEBUG if allowed is None else allowed)


def provider_refusal(provider: str) -> str | None:
    """Why a user of the API or the playground may not start (or fork into) a run on
    ``provider``, or ``None`` when they may. The commands, for operators with a shell, are not
    asked: they may always use the scripted provider."""
    if provider in TEST_DOUBLE_PROVIDERS and not test_doubles_allowed():
        return (
            f"the {provider} provider is a test double and is off in production; choose another provider "
            "(an operator may turn it on with NRLLM_ALLOW_SCRIPTED=1)"
        )
    return None


def offered_providers(names: list[str]) -> list[str]:
    """Of the registered provider ``names``, those the API and the playground offer now."""
    return [name for name in names if provider_refusal(name) is None]


class Setup(enum.StrEnum):
    """What a caller wants to do with the run setup: connections, prices, agents, budgets."""

    VIEW = "view"
    ADD = "add"
    CHANGE = "change"
    DELETE = "delete"


SETUP_MODELS = ("connection", "price", "agent", "budget")


def may_configure(user: Any, action: Setup, model: str) -> bool:
    """Connections, prices, agents and budgets (admin and API): staff holding the model's permission
    (``nrllm_agents.<action>_<model>``; viewing is also granted by the change permission).
    Anyone signed in may name one in a run request; a connection's key is never shown to anybody.
    Every signed-in user reads the budgets covering their own runs (``may_see_all_budgets`` is the rest)."""
    if model not in SETUP_MODELS or not sees_all(user):
        return False
    if action == Setup.VIEW and user.has_perm(f"nrllm_agents.change_{model}"):
        return True
    return bool(user.has_perm(f"nrllm_agents.{action.value}_{model}"))


def may_see_all_budgets(user: Any) -> bool:
    """Every budget, not only those covering one's own runs: staff who may view budgets."""
    return may_configure(user, Setup.VIEW, "budget")


def may_see_agents(user: Any) -> bool:
    """The list of agents and their definitions (no secret in them): every signed-in user, who
    may start runs from them."""
    return authenticated(user)


# --- who may use a saved agent or a connection in a run -------------------------------------


def _uses_all(user: Any, model: type[Agent] | type[Connection]) -> bool:
    """Superusers, and staff who may change the model's rows, use every one of them."""
    return authenticated(user) and (
        bool(user.is_superuser) or may_configure(user, Setup.CHANGE, model._meta.model_name or "")
    )


def _usable_by(user: Any, model: type[Agent] | type[Connection]) -> Any:
    """The rows of ``model`` that ``user`` (signed in, not one who uses all) may use: those open to
    everyone (no user and no group named), those naming the user, and those naming a group of the
    user's; as ``EXISTS`` subqueries, so a list or one row is one query."""
    users: Any = model._meta.get_field("allowed_users")
    groups: Any = model._meta.get_field("allowed_groups")
    named_users = users.remote_field.through.objects.filter(**{users.m2m_field_name(): OuterRef("pk")})
    named_groups = groups.remote_field.through.objects.filter(**{groups.m2m_field_name(): OuterRef("pk")})
    open_to_all = ~Exists(named_users) & ~Exists(named_groups)
    mine = Exists(named_users.filter(**{users.m2m_reverse_field_name(): user.pk}))
    memberships = getattr(user, "groups", None)
    if memberships is None:  # a user model without groups
        return open_to_all | mine
    member = named_groups.filter(**{f"{groups.m2m_reverse_field_name()}__in": memberships.values("pk")})
    return open_to_all | mine | Exists(member)


def _usable(user: Any, model: type[Agent] | type[Connection]) -> QuerySet[Any]:
    rows: QuerySet[Any] = model.objects.all()
    if not authenticated(user):
        return rows.none()
    return rows if _uses_all(user, model) else rows.filter(_usable_by(user, model))


def usable_agents(user: Any) -> QuerySet[Agent]:
    """The saved agents ``user`` may start runs from (the lists: API, playground, commands)."""
    return _usable(user, Agent)


def usable_connections(user: Any) -> QuerySet[Connection]:
    """The connections ``user`` may run through."""
    return _usable(user, Connection)


def _may_use(user: Any, model: type[Agent] | type[Connection], row: Named | str) -> bool:
    rows = _usable(user, model)
    return rows.filter(pk=row.pk).exists() if isinstance(row, Named) else rows.filter(name=row).exists()


def may_use_agent(user: Any, agent: Agent | str) -> bool:
    """Whether ``user`` may start a run from ``agent`` (a row or its name): it names nobody, or the
    user or one of their groups; superusers and staff who may change agents use every agent. At
    most one query (none for those who use all)."""
    return _may_use(user, Agent, agent)


def may_use_connection(user: Any, connection: Connection | str) -> bool:
    """Whether ``user`` may run through ``connection`` (a row or its name), as ``may_use_agent``."""
    return _may_use(user, Connection, connection)


class UseRefused(KindedError):
    """The user may not use a saved agent or a connection the run names: nothing starts."""

    kind = Kind.FORBIDDEN

    def __init__(self, what: str, name: str) -> None:
        self.what, self.name = what, name
        super().__init__(f"you may not use {what} {name!r}")

    def subject(self) -> dict[str, Any]:
        return {self.what: self.name}


def check_use(user: Any, agent: str | None = None, connection: str | None = None) -> None:
    """Raise ``UseRefused`` when ``user`` may not use the saved ``agent`` or the ``connection``
    (their names) a run is to start with. ``None`` (a run of no owner: a command without
    ``--owner``, Python code) is not asked: whoever runs it holds the keys already."""
    if user is None:
        return
    if agent and not may_use_agent(user, agent):
        raise UseRefused("agent", agent)
    if connection and not may_use_connection(user, connection):
        raise UseRefused("connection", connection)
