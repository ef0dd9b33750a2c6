"""Who may do what: the one policy every surface asks (``policy``)."""
