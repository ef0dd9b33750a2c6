"""How things read on every surface: what the runtime returns and the words for it
(``outcomes``), the one step describer (``describe``) and the shared JSON shapes (``presenters``)."""
