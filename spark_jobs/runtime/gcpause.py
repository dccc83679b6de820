"""Pause Python's cyclic garbage collector while a subtask restores, processes and snapshots.

Why: restore and snapshot create hundreds of thousands of long-lived objects (state rows, entry
tuples, dicts). Each burst of allocations triggers full (generation 2) collections that traverse
every live object -- measured on the S1 benchmark: 4 full collections per epoch and 25-35% of the
epoch time. None of these objects are cyclic garbage while the subtask runs, so nothing is lost
by collecting later: the collector resumes when the outermost pause ends.

A subtask runs from its restore to its acks in one pause (``executors.run_keyed_subtask``) and
disposes of its state before the pause ends (``SubtaskRunner.dispose``): the backend and its
handles form reference cycles, so otherwise the whole state would wait for the collector, and the
first collections after the pause would traverse every object the epoch created (measured in
process on S1: 4.4 s of GC in a 22 s run; 0.02 s with both).

Invariants: pauses nest and may overlap across threads (a depth counter under a lock); the
collector is re-enabled only by the outermost exit and only if it was enabled at the first entry
(a process that disabled it itself keeps it disabled); an exception still ends the pause.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

ENABLED = True
"""Off: ``gc_paused`` does nothing (``bench/ablation.py`` measures what the pause gains)."""
_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    global _depth, _was_enabled
    if not ENABLED:
        yield
        return
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
