"""Issue 20 item 9: the cap on model label values holds under a forking ``rqworker``.

Guards: every RQ work horse started with a fresh count of the names it had labelled, so 60
runs naming 60 models became 60 label values (the documented cap is 50). The names are now
admitted through one file of the shared multiprocess directory, under a lock.

``transaction=True``: the worker is another process that reads and writes the test database.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from nrllm_agents.models import AgentRun, RunStatus
from nrllm_agents.observability.metrics import MODEL_LABELS_MAX
from nrllm_agents.runtime.agent_runtime import AgentRuntime
from tests.e2e.processes import Workers, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

MODELS = 60


def model_labels(directory: str) -> dict[str, float]:
    """Prompt tokens by ``model`` label, as every process of ``directory`` counted them."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name == "nrllm_tokens_total" and sample.labels.get("kind") == "prompt":
                found[sample.labels["model"]] = found.get(sample.labels["model"], 0) + sample.value
    return found


def test_sixty_models_through_a_forking_rqworker_make_at_most_fifty_labels(queue, worker_env, tmp_path):
    prom_dir = tmp_path / "prometheus"
    prom_dir.mkdir()
    env = {**worker_env, "PROMETHEUS_MULTIPROC_DIR": str(prom_dir)}
    runtime = AgentRuntime()
    with Workers(env, count=1, log_dir=tmp_path / "logs"):
        ids = [
            runtime.enqueue(
                {
                    "prompt": "p",
                    "model": f"model-{i:02d}",
                    "tools": [],
                    "script": [{"content": "ok", "usage": {"prompt_tokens": 1, "completion_tokens": 1}}],
                }
            )
            for i in range(MODELS)
        ]
        wait_for(
            lambda: AgentRun.objects.filter(pk__in=ids, status=RunStatus.COMPLETED).count() == MODELS,
            timeout=300,
            what="the 60 runs",
        )
    labels = model_labels(str(prom_dir))
    named = {name for name in labels if name != "other"}
    assert len(named) == MODEL_LABELS_MAX, sorted(labels)
    assert labels["other"] == MODELS - MODEL_LABELS_MAX  # every token is still counted
    assert sum(labels.values()) == MODELS
