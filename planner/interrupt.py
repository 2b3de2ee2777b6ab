"""A cooperative stop for a running solve (the first Ctrl-C): the search ends as at its time limit and
returns the best plan found so far, marked INTERRUPTED.

The command line runs the solve in a worker thread and calls request() from the main thread, where
Python delivers SIGINT. Loops poll requested(); CP-SAT, busy in native code, is told through
stop_search() on every solver registered with running() (CP-SAT's own SIGINT handler is switched off
for the same reason: the signal belongs to the main thread).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

_event = threading.Event()
_lock = threading.Lock()
_solvers: set = set()


def requested() -> bool:
    return _event.is_set()


def request() -> None:
    _event.set()
    with _lock:
        for s in list(_solvers):
            s.stop_search()


def reset() -> None:
    _event.clear()


@contextmanager
def running(solver):
    """Register a CP-SAT solver for the duration of its solve, so that request() can stop it."""
    with _lock:
        _solvers.add(solver)
    try:
        yield solver
    finally:
        with _lock:
            _solvers.discard(solver)
