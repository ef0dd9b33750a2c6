"""The HTTP floor shared by every web surface: the request guard (``edge``) and the one mapping
of policy verdicts and domain errors to statuses and bodies (``answers``)."""
