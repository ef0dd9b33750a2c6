"""Sign-in throttling: too many failed sign-ins of one username from one address, and that
username may not sign in from there, even with the right password, until the window passes.

``NRLLM_AGENTS["SIGN_IN_FAILURES"]`` (``"10/15min"`` by default; ``None`` or ``""``: off) is
the rate. Failures are counted by the project's one limiter (``admission.rates``: Redis when
``REDIS_URL`` is set, else the database), so every process shares them. Three parts:

- ``ThrottledModelBackend``, Django's ``ModelBackend`` in ``AUTHENTICATION_BACKENDS`` (first, if
  there are others): refuses (``PermissionDenied``, which stops every later backend) a sign-in
  whose username and address are over the rate, and otherwise signs in as ``ModelBackend`` does;
- ``count_failure``, connected to ``user_login_failed`` in ``AppConfig.ready()``: counts one;
- ``SignInForm`` and ``AdminSignInForm``: the playground's and the admin's sign-in forms, which
  say why and for how long instead of "wrong password".

A sign-in with no request (``Client.login``, a shell's ``authenticate``) is neither checked nor
counted: there is no address to count it against.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import PermissionDenied

from ..admission import rates
from ..conf import app_settings

SCOPE = "sign_in"
REFUSED_ATTRIBUTE = "nrllm_sign_in_refused"  # set on the request the backend refused


def rate() -> tuple[int, int] | None:
    """``(failures allowed, per seconds)``, or ``None`` when sign-in is not throttled."""
    value = app_settings.SIGN_IN_FAILURES
    return rates.parse_rate(value) if value else None


def _ident(request: Any, username: Any) -> str:
    """The username (case-folded, hashed: any text fits a key) and the client's address."""
    name = hashlib.sha256(str(username or "").casefold().encode("utf-8", "replace")).hexdigest()[:32]
    return f"{name}@{request.META.get('REMOTE_ADDR', '')}"


def _username(credentials: dict[str, Any]) -> Any:
    return credentials.get(get_user_model().USERNAME_FIELD, credentials.get("username"))


class ThrottledModelBackend(ModelBackend):
    """Django's ``ModelBackend``, which first refuses a sign-in over the rate."""

    def authenticate(self, request: Any, username: Any = None, password: Any = None, **kwargs: Any) -> Any:
        limit = rate()
        if request is not None and limit is not None:
            who = username if username is not None else _username(kwargs)
            refused = rates.check(f"{SCOPE}/{limit[1]}", _ident(request, who), *limit)
            if refused is not None:
                setattr(request, REFUSED_ATTRIBUTE, refused)
                raise PermissionDenied(refused.detail)
        return super().authenticate(request, username=username, password=password, **kwargs)


def count_failure(sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any) -> None:
    """``user_login_failed``'s receiver: one failure of this username from this address."""
    limit = rate()
    if request is None or limit is None or getattr(request, REFUSED_ATTRIBUTE, None) is not None:
        return
    rates.attempt(f"{SCOPE}/{limit[1]}", _ident(request, _username(credentials)), *limit)


def refusal_message(request: Any) -> str | None:
    """What a sign-in form says when the backend refused the request, else ``None``."""
    refused = getattr(request, REFUSED_ATTRIBUTE, None)
    if refused is None:
        return None
    return f"Too many failed sign-ins for this username from your address; try again in {refused.wait} s."


class SignInForm(AuthenticationForm):
    """Django's sign-in form, which says so when sign-in is throttled."""

    @property
    def throttled_message(self) -> str | None:
        """Why sign-in was refused when it was throttled (for a template), else ``None``."""
        return refusal_message(self.request)

    def get_invalid_login_error(self) -> forms.ValidationError:
        message = self.throttled_message
        if message is not None:
            return forms.ValidationError(message, code="throttled")
        return super().get_invalid_login_error()


class AdminSignInForm(SignInForm, AdminAuthenticationForm):
    """The admin's sign-in form (staff only), which says so when sign-in is throttled."""
