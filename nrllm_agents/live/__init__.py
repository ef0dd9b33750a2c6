"""What happens while a run executes, pushed as it happens: the cancel watcher (``interrupts``),
steps and deltas to watchers (``push``, ``deltas``, ``watch``)."""
