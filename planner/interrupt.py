"""A cooperative stop for a running solve (the first Ctrl-C): the search ends as at its time limit and
returns the best plan found so far, marked INTERRUPTED.

The command line runs the solve in a worker thread and calls request() from the main thread, where
Python delivers SIGINT. Loops poll requested(); CP-SAT, busy in native code, is told through
stop_search() on every solver registered with running() (CP-SAT's own SIGINT handler is switched off
for the same reason: the signal belongs to the main thread).
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
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


@contextmanager
def deferred_sigint() -> Iterator[None]:
    """Hold a Ctrl-C that arrives inside the block and act on it when the block ends.

    For steps that must not be cut halfway, such as starting worker processes: a KeyboardInterrupt in
    the middle leaves a half-started worker that fails noisily after the parent has gone. SIGINT is
    also blocked in this thread meanwhile, so processes started inside (a forkserver, its workers)
    begin with it blocked: a Ctrl-C on the terminal reaches the whole process group, and would kill
    them before they can set their own handlers. Outside the main thread (where Python cannot set
    handlers) the block runs unprotected.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, _frame: got.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if hasattr(signal, "pthread_sigmask") else None
    try:
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)    # a pending SIGINT reaches the recorder now
        signal.signal(signal.SIGINT, old)
    if got:
        if callable(old):
            old(signal.SIGINT, None)      # Python's default handler raises KeyboardInterrupt here
        elif old == signal.SIG_DFL:
            raise KeyboardInterrupt
