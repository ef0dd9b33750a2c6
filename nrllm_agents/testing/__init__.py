"""Test doubles shipped with the product: a scripted OpenAI-compatible chat server."""
