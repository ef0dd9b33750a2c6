"""Secrets at rest: a connection's key is encrypted here and decrypted only for the call."""
