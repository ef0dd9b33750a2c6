"""The browser surface: the playground pages (``views``) and the run stream (``stream``).

``urls`` is included by ``nrllm_agents.urls`` under the host's prefix; it owns ``playground/…``
and ``accounts/login|logout/`` (the stream, ``api/runs/<id>/stream/``, is the API's).
Nothing here writes a run's status: every action calls ``AgentRuntime`` and maps its result.
"""
