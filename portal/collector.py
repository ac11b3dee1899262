"""Python's cyclic garbage collector, tuned once a long-running process has loaded what it keeps.

A web or worker process builds, at start-up, everything it keeps until it ends: Django, the
URLconf, the models, the tasks, the libraries (about 190,000 objects). ``gc.freeze()`` takes them
out of the collector's sight, so a full collection no longer walks them on every batch of new
garbage (as Instagram does for Django). What is left to collect is what requests and tasks make,
most of it freed by reference counting before any collection sees it; a first-generation
threshold of 50,000 instead of 700 lets a controller round, which holds a few thousand sessions'
rows and payloads for its length, end before a collection walks them, instead of walking them again
at every few hundred allocations.

Measured (a class start of 1,024 on 8 servers, ``gc.callbacks`` timing every collection on the
thread's CPU clock; docs/performance.md, "The cyclic garbage collector"): the workers spent 8–9 %
of their CPU in the collector without this and 1 % with it; the web processes 4 % with the freeze
alone and 3 % with the threshold too, for about 15 MB more at their peak.
"""

from __future__ import annotations

import gc

# Allocations (less deallocations) of tracked objects between first-generation collections; the
# older generations keep Python's ratios but a little wider, as the first one is 70 times larger.
THRESHOLDS = (50_000, 20, 10)


def collector_tuned() -> None:
    """Freeze what the process has built so far and raise the collection thresholds. Call it once
    the process has loaded what it keeps (``portal/asgi.py`` at its end, ``portal/celery.py`` as
    each worker process starts)."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
