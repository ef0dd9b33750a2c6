"""The site's settings with one extra URL that raises (``failing_urls``): how the tests of issue
20 item 11 make a server answer 500 without a bug to exploit."""

from config.settings import *  # noqa: F401,F403

ROOT_URLCONF = "tests.e2e.failing_urls"
