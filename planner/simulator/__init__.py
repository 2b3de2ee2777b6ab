"""Op-level simulation of one plan (the judge of the closed-form models).

ops.py / orders.py: per-device operation orders of each schedule; engine.py: the event-driven
replay of those orders; replay.py: a plan (spec, config, mapping) turned into ops and replayed;
deepspeed.py: DeepSpeed's pipeline engine instruction by instruction; plot.py, trace.py: output.
"""
from planner.simulator.engine import DeadlockError
from planner.simulator.replay import SimResult, agreement, simulate, simulate_uniform

__all__ = ["DeadlockError", "SimResult", "agreement", "simulate", "simulate_uniform"]
