"""Money: the price in force and a run's cost (``pricing``), and how an amount is written
(``amounts``)."""
