"""Who may do what: the one policy every surface asks (``policy``), and the sign-in (``signin``).

Public: what a host names in its settings and URLconf, ``nrllm_agents.access.ThrottledModelBackend``
(``AUTHENTICATION_BACKENDS``: Django's ``ModelBackend`` that refuses past the sign-in rate) and
``nrllm_agents.access.AdminSignInForm`` (``admin.site.login_form``), re-exported from the private
``signin`` (whose paths keep working). Imported on first use: the policy needs no forms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..domain.exports import on_first_use

__all__ = ["AdminSignInForm", "ThrottledModelBackend"]

if TYPE_CHECKING:
    from .signin import AdminSignInForm, ThrottledModelBackend


__getattr__ = on_first_use(globals(), dict.fromkeys(__all__, ".signin"))
