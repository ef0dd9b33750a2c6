"""nrllm_agents: durable, auditable LLM tool-calling agent runs with cooperative cancellation.

Import the runtime from ``nrllm_agents.runtime`` (it needs Django set up); the
database-free core lives in ``nrllm_agents.domain``.
"""
