"""Pausing Python's cyclic garbage collector around bulk work on tens of thousands of objects.

Building or ranking 10,000-100,000 offers allocates objects without reference cycles; each
automatic collection meanwhile rescans every live offer. Pausing the collector for the bulk step
(and restoring its state after) spares those scans (benchmarks/bench_store.py and bench_quote.py
measure the gain).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
