"""Chrome / Perfetto trace (JSON Trace Event Format) of a simulation: load it at ui.perfetto.dev."""
from __future__ import annotations

import json

import numpy as np

from planner.io import atomic_write_text
from planner.simulator.ops import KIND_NAMES, dp_sync_name

KIND_LONG = {"F": "forward", "B": "backward", "W": "weight-grad", "R": "recompute"}


def trace_events(sim, memory_counters: bool = True) -> list[dict]:
    p = sim.schedule.p
    sync = dp_sync_name(sim.config.zero if sim.config else 0)
    steps = list(getattr(sim, "step_s", None) or [])
    ev = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "compute"}},
          {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": f"data-parallel {sync}"}}]
    if any(x > 0 for x in steps):
        ev.append({"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "optimizer step"}})
    for d in range(p):
        ev.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": d, "args": {"name": f"pp rank {d}"}})
        ev.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": d, "args": {"name": f"pp rank {d}"}})
    us = 1e6
    start, end = sim.op_start * us, sim.op_end * us
    stage = sim.schedule.stage_of()[sim.op_dev, sim.op_chunk]
    cp = getattr(sim, "cp_exposed_s", None) or []
    v = sim.schedule.v
    for i in range(len(start)):
        k = KIND_NAMES[int(sim.op_kind[i])]
        args = {"micro_batch": int(sim.op_mb[i]), "chunk": int(sim.op_chunk[i]), "stage": int(stage[i])}
        if cp and k in ("F", "B"):     # context parallel: the exposed exchange inside this op (its chunk's share)
            args["cp_exposed_us"] = round(cp[int(sim.op_dev[i])][0 if k == "F" else 1] / v * us, 3)
        ev.append({"name": f"{k}{int(sim.op_mb[i])}", "cat": KIND_LONG[k], "ph": "X", "pid": 0,
                   "tid": int(sim.op_dev[i]), "ts": float(start[i]), "dur": float(end[i] - start[i]),
                   "args": args})
    for d in range(p):
        if sim.dp_end and sim.dp_end[d] > sim.dp_start[d]:
            ev.append({"name": sync, "cat": "dp", "ph": "X", "pid": 1, "tid": d,
                       "ts": sim.dp_start[d] * us, "dur": (sim.dp_end[d] - sim.dp_start[d]) * us})
        # the optimizer step after the device's sync (the iteration ends with the slowest one)
        if d < len(steps) and steps[d] > 0 and sim.dp_end:
            ev.append({"name": "optimizer step", "cat": "optimizer", "ph": "X", "pid": 2, "tid": d,
                       "ts": sim.dp_end[d] * us, "dur": steps[d] * us})
    if memory_counters:
        for d in range(p):
            t, live = sim.memory_timeline(d)
            base = sim.static_memory_GiB[d]
            # one counter sample per change; thin very long timelines to keep the file loadable
            step = max(1, len(t) // 20000)
            for x, y in zip(t[::step], live[::step], strict=True):
                ev.append({"name": f"memory GiB rank {d}", "ph": "C", "pid": 0, "ts": float(x * us),
                           "args": {"GiB": round(float(base + y), 4)}})
    return ev


def write_trace(sim, path: str) -> None:
    data = {"traceEvents": trace_events(sim), "displayTimeUnit": "ms",
            "otherData": {"iteration_s": sim.iteration_s, "schedule": sim.schedule.name,
                          "bubble_fraction": sim.bubble_fraction}}
    atomic_write_text(path, json.dumps(data, default=lambda o: o.item() if isinstance(o, np.generic) else str(o)))
