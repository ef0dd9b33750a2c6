"""Settings for the test suite: the site's settings in development mode.

Debug is asked for here (it is off by default); pytest-django still runs the tests
themselves with ``DEBUG = False``. Child processes started by the tests (workers, servers,
commands) inherit the variable.
"""

import os

os.environ.setdefault("DJANGO_DEBUG", "1")
# No background sweeper thread in the test process (it would hold a connection to the test
# database); tests of the sweep call it, or turn it on for the processes they start.
os.environ.setdefault("NRLLM_QUEUED_SWEEP_SECONDS", "0")
# pytest-django runs the tests with DEBUG off, where the scripted provider (the suite's model)
# is closed to API and playground users; the tests of that rule set it back to None.
os.environ.setdefault("NRLLM_ALLOW_SCRIPTED", "1")
# The key that encrypts connections' API keys (the tests run with DEBUG off, where no key is
# derived from SECRET_KEY); a fixed test-only Fernet key, inherited by child processes.
os.environ.setdefault("NRLLM_SECRET_KEYS", "dGVzdC1vbmx5LWZlcm5ldC1rZXktMzItYnl0ZXMhISE=")

from .settings import *  # noqa: E402,F401,F403

# A fast hasher for the suite's users (Django's "speeding up the tests"): the default PBKDF2
# costs about 0.7 s per hash, paid for every user a test creates and every sign-in, in the test
# process and in the servers it starts (they inherit these settings). Never outside the tests.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
