"""Imported by the batch's forkserver only (its preload list): Ctrl-C is the parent's to handle.

The forkserver records the SIGINT disposition it has after its preload imports and gives it to every
worker it forks, so importing this there makes workers ignore SIGINT from their first instruction:
a Ctrl-C on the terminal reaches the whole process group, and a worker hit while starting would print
a traceback. The parent stops the workers itself (planner.batch.run._stop_pool). Workers from a
forkserver started without this preload are covered later by their initializer
(planner.batch.run.worker_init).
"""
import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
