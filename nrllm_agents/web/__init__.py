"""The browser surface: the playground pages (``views``) and the run stream (``stream``).

``urls`` is mounted at the site root; it owns ``/playground/…``, ``/accounts/login|logout/``
and ``/api/runs/<id>/stream/``. Nothing here writes a run's status: every action calls
``AgentRuntime`` and maps its result.
"""
