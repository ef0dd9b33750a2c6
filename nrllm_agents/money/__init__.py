"""Money: the price in force and a run's cost (``pricing``), how an amount is written
(``amounts``) and how one is read (``parsing``: the one parser of every surface; ``fields``: its
form field)."""
