"""The simulator and the closed form on vTrain's measured multi-node runs.

The issue #5 target (simulation error no worse than the closed form's) is a figure, reported by
benchmarks/sim_vs_vtrain.py (docs/notes/simulator.md, fourth round: with both models running DeepSpeed's pipeline
engine, which vTrain's runs used, simulation 7.89% vs closed form 7.57%: missed). Here we test behaviour: on real
configurations the op-level replay and the closed form describe the same plan, the closed form bounds the replay
from above, and both stay within a sane error of the measurements.
"""
import importlib.util
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data", "vtrain-a100", "measured_multi_node.csv")
if not os.path.exists(DATA):        # the copy shipped with the package (same file)
    DATA = os.path.join(ROOT, "planner", "data", "vtrain", "measured_multi_node.csv")


@pytest.mark.skipif(not os.path.exists(DATA), reason="shared vTrain data not present")
def test_simulation_and_closed_form_agree_on_measured_runs():
    out = _bench().compare(DATA)
    assert len(out) >= 100
    a = np.array([(m, s, e) for _, _, m, s, e in out])
    gap = np.abs(a[:, 1] - a[:, 2]) / a[:, 1]
    assert np.median(gap) < 0.03 and gap.max() < 0.10, (np.median(gap), gap.max())
    sim_err = np.mean(np.abs(a[:, 1] - a[:, 0]) / a[:, 0])
    assert sim_err < 0.15


@pytest.mark.skipif(not os.path.exists(DATA), reason="shared vTrain data not present")
def test_deepspeed_engine_closed_form_bounds_the_simulation():
    """vTrain's rows ran on DeepSpeed's pipeline engine (validate.VTRAIN_DEFAULTS). Its closed form charges the
    slowest stage's compute and the busiest stage's transfers separately (a sum of maxima), the simulation the
    slowest stage's compute + transfers (their maximum), so the closed form is never below the replay; with
    uniform stages they are equal (test_sim_deepspeed). Plus regression guards at the levels reached (Nov 23:
    closed form 7.57%, simulation 7.89%; figures from benchmarks/sim_vs_vtrain.py)."""
    mod = _bench()
    a = np.array([(m, s, e) for _, _, m, s, e in mod.compare(DATA)])
    assert np.all(a[:, 2] >= a[:, 1] * (1 - 1e-9))
    sim_err = np.mean(np.abs(a[:, 1] - a[:, 0]) / a[:, 0])
    est_err = np.mean(np.abs(a[:, 2] - a[:, 0]) / a[:, 0])
    assert est_err <= 0.08 and sim_err <= 0.085, (sim_err, est_err)
    # the engine matters: Megatron-LM's p2p model (sends overlapping compute) charges less on pipelined rows
    mega = np.array([(m, s, e) for _, _, m, s, e in mod.compare(DATA, pipeline_engine="megatron")])
    assert np.median(a[:, 1] / mega[:, 1]) >= 1.0 and np.mean(a[:, 1] / mega[:, 1]) > 1.0


def _bench():
    spec = importlib.util.spec_from_file_location("sim_vs_vtrain", os.path.join(ROOT, "benchmarks", "sim_vs_vtrain.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
