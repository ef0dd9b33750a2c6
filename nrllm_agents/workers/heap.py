"""Keep Python's full garbage collections off the path of the steps in flight (``gc.freeze``).

A full collection scans every container object the process tracks, holding the GIL: in a worker
that has loaded Django and this app that is about 90,000 objects, and about 360,000 once the
provider SDKs are imported, a pause of 75 to 260 ms during which every thread of the process
waits, the cancel of a step in flight included (``bench/tree_cancel.py`` saw leaves stop up to
100 ms late behind one). What a worker loads to execute runs (modules, classes, tables) lives as
long as the process: frozen, the collector leaves it alone, and a full collection scans only what
the runs allocate (about 3 ms on the same stack).

``agent_worker`` freezes once it has started (``freeze``), and again when its runs have imported
modules since (``refreeze_if_grown``: a provider's SDK is imported by the first run that uses
it); ``rqworker`` freezes once, and each work horse it forks inherits that (and shares those
pages with its parent instead of copying them as the collector would touch them). Each
freeze collects first (one pause, then none). Objects frozen while alive are still freed by
reference counting; only those that later end up in a reference cycle stay until the process
exits, and a worker freezes only a few times in its life.
"""

from __future__ import annotations

import gc
import sys

_modules_at_freeze = 0


def freeze() -> int:
    """Collect, then move every object the process tracks out of the collector's reach; returns
    how many objects are frozen now."""
    global _modules_at_freeze
    gc.collect()
    gc.freeze()
    _modules_at_freeze = len(sys.modules)
    return gc.get_freeze_count()


def refreeze_if_grown() -> bool:
    """``freeze`` again if modules were imported since the last freeze (none: a process that
    never froze, such as a test calling a worker's method, is left alone); whether it did."""
    if not _modules_at_freeze or len(sys.modules) <= _modules_at_freeze:
        return False
    freeze()
    return True
