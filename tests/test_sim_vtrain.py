"""The simulator and the closed form on vTrain's measured multi-node runs.

The issue #5 target (simulation error no worse than the closed form's) is a figure, reported by
benchmarks/sim_vs_vtrain.py; with the refitted compute model and the corrected closed form (third round,
docs/notes/simulator.md) it is missed with the simulator's default asynchronous p2p (9.18% vs 8.37% MAPE) and with
blocking p2p (8.48%), met with rendezvous p2p (7.89%), a p2p model added after those figures were seen. Here we
test behaviour: on real configurations the op-level replay and the closed form describe the same plan, and both
stay within a sane error of the measurements; plus a regression guard at the level reached with rendezvous p2p.
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


@pytest.mark.skipif(not os.path.exists(DATA), reason="shared vTrain data not present")
def test_rendezvous_simulation_no_worse_than_closed_form_regression_guard():
    """Regression guard, not a blind test: rendezvous p2p was chosen after its figure was seen (simulator.md)."""
    spec = importlib.util.spec_from_file_location("sim_vs_vtrain", os.path.join(ROOT, "benchmarks", "sim_vs_vtrain.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a = np.array([(m, s, e) for _, _, m, s, e in mod.compare(DATA, rendezvous_p2p=True)])
    sim_err = np.mean(np.abs(a[:, 1] - a[:, 0]) / a[:, 0])
    est_err = np.mean(np.abs(a[:, 2] - a[:, 0]) / a[:, 0])
    assert sim_err <= est_err, (sim_err, est_err)
    # holding the receiver too puts the replay at or above the closed form's p2p count on pipelined rows
    assert np.median(a[:, 1] / a[:, 2]) > 1.0
