"""The simulator and the closed form on vTrain's measured multi-node runs.

The issue #5 target (simulation error no worse than the closed form's) is a figure, reported by
benchmarks/sim_vs_vtrain.py; with the fitted compute model and the measured HDR bandwidth it is currently
missed (9.5% vs 7.9% MAPE, 8.8% with blocking p2p; docs/notes/simulator.md). Here we test behaviour: on real configurations the op-level replay
and the closed form describe the same plan, and both stay within a sane error of the measurements.
"""
import importlib.util
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data", "vtrain-a100", "measured_multi_node.csv")


@pytest.mark.skipif(not os.path.exists(DATA), reason="shared vTrain data not present")
def test_simulation_and_closed_form_agree_on_measured_runs():
    spec = importlib.util.spec_from_file_location("sim_vs_vtrain", os.path.join(ROOT, "benchmarks", "sim_vs_vtrain.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.compare(DATA)
    assert len(out) >= 100
    a = np.array([(m, s, e) for _, _, m, s, e in out])
    gap = np.abs(a[:, 1] - a[:, 2]) / a[:, 1]
    assert np.median(gap) < 0.03 and gap.max() < 0.10, (np.median(gap), gap.max())
    sim_err = np.mean(np.abs(a[:, 1] - a[:, 0]) / a[:, 0])
    assert sim_err < 0.15
