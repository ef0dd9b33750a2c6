"""The middleware a host puts in ``MIDDLEWARE``: ``EdgeGuardMiddleware`` (NUL characters and
oversized API bodies refused at the edge) and ``ContentSecurityPolicyMiddleware`` (the CSP
header on Django 5.2, which has no ``ContentSecurityPolicyMiddleware`` of its own).

A public module in front of the private ``http/`` floor, re-exported the way Temporal's
sdk-python does; ``nrllm_agents.http.edge.EdgeGuardMiddleware`` keeps working.
"""

from __future__ import annotations

from .http.csp import ContentSecurityPolicyMiddleware
from .http.edge import EdgeGuardMiddleware

__all__ = ["ContentSecurityPolicyMiddleware", "EdgeGuardMiddleware"]
