from django.apps import AppConfig


class NrllmAgentsConfig(AppConfig):
    name = "nrllm_agents"
    verbose_name = "Agent runs"
    default_auto_field = "django.db.models.BigAutoField"
