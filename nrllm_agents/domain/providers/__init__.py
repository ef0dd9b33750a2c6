"""Model providers: the protocol, the offline scripted one, and the OpenAI-compatible one."""

from .base import Provider
from .openai_compat import OpenAIProvider
from .scripted import DEMO_SCRIPT, CallJournal, ScriptedProvider, validate_script

__all__ = ["DEMO_SCRIPT", "CallJournal", "OpenAIProvider", "Provider", "ScriptedProvider", "validate_script"]
