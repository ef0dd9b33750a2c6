"""What happens while a run executes, pushed as it happens. ``listener`` owns the process's one
listening connection; its clients are the cancel watcher (``interrupts``), the hub that pushes
steps to watchers (``push``, read through ``watch``) and the publisher of steps and deltas
(``deltas``)."""
