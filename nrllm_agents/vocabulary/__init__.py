"""The words every surface shares: who may (``policy``), what happened (``outcomes``), how a step
reads (``describe``, ``presenters``), what a valid run request is (``run_request``), and money
(``pricing``, ``money``)."""
