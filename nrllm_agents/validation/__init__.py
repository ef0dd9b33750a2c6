"""Whether a run request is valid: its fields, sizes and limits (``run_request``)."""
