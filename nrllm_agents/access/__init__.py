"""Who may do what: the one policy every surface asks (``policy``), and the sign-in (``signin``).

Public: what a host names in its settings and URLconf, ``nrllm_agents.access.ThrottledModelBackend``
(``AUTHENTICATION_BACKENDS``: Django's ``ModelBackend`` that refuses past the sign-in rate) and
``nrllm_agents.access.AdminSignInForm`` (``admin.site.login_form``), re-exported from the private
``signin`` (whose paths keep working). Imported on first use: the policy needs no forms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["AdminSignInForm", "ThrottledModelBackend"]

if TYPE_CHECKING:
    from .signin import AdminSignInForm, ThrottledModelBackend


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import signin

    return getattr(signin, name)
