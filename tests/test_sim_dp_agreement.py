"""The estimate's data-parallel term against the replay on the kinds of plan the fuzz of valid plans found 5-10% apart
(docs/notes/simulator.md, "The fuzz's data-parallel gaps"): Megatron-Core's interleaved schedule, whose chunks'
reductions are issued chunk by chunk through the cool-down (iteration.interleaved_dp_exposed_s), and plans whose tp x cp
group spans nodes, whose links between blocks the estimate and the replay now take alike (iteration.block_bandwidth)."""
from __future__ import annotations

import numpy as np
import pytest

import planner
from planner.config import ParallelConfig
from planner.costs.iteration import block_bandwidth
from planner.search.solve import estimate_plan
from planner.simulator import agreement


def _gap(path, cfg):
    spec = planner.load_spec(path)
    est, lay, assign, prob = estimate_plan(spec, cfg)
    sim = planner.simulate(spec, cfg, layout=lay, assign=assign, nodes=prob.nodes)
    return agreement(sim, est)


@pytest.mark.parametrize("path,cfg,hi", [
    # the fuzz's case 193 kind: +2.4% before (+7.6% with fp32 gradient reduction)
    ("specs/gpt3-175b-a100-het-1024.yaml", ParallelConfig(4, 4, 64, 2, 12, "interleaved", 4, "selective", 1), 0.01),
    # case 321's kind (V100, pp 2): +4.6% before
    ("specs/llama2-7b-v100-het-128.yaml", ParallelConfig(1, 2, 64, 1, 4, "interleaved", 4, "none", 1), 0.02),
    ("specs/gpt3-13b-a100-het-128.yaml", ParallelConfig(1, 4, 32, 1, 16, "interleaved", 2, "full", 1), 0.01),
    # the fuzz's seed 2 case 283 (+8.4% before the leads were walked with hops) and seed 0 case 321 (+6.7%): pp 2 on
    # V100 links, where the cool-down's hops lengthen the chunks' leads past their rings
    ("specs/llama2-7b-v100-het-128.yaml", ParallelConfig(1, 2, 64, 1, 4, "interleaved", 8, "block", 0,
                                                         recompute_layers=1), 0.01),
    ("specs/llama2-7b-v100-het-drift-128.yaml", ParallelConfig(1, 2, 64, 1, 4, "interleaved", 4, "selective", 0),
     0.025),
])
def test_interleaved_overlapped_reduction_close_to_the_replay(path, cfg, hi):
    """Overlapped gradient reduction (the shipped specs' default) on interleaved plans: the estimate within `hi` of the
    replay of the same placement, and not under it by more than rounding (its chunk leads are lower bounds)."""
    assert -0.001 <= _gap(path, cfg) <= hi


@pytest.mark.parametrize("path,cfg", [
    # the fuzz's seed 4 case 8 (-5.8% before): fp32 gradient reduction, m = 2 pp
    ("specs/gpt3-13b-a100-het-128.yaml", ParallelConfig(4, 2, 16, 8, 4, "zb-h1", 1, "none", 1,
                                                         sequence_parallel=True)),
    # seed 0 case 32's kind: one micro-batch (m < pp), each stage's W right after its B
    ("specs/gpt3-13b-a100-het-128.yaml", ParallelConfig(1, 2, 64, 8, 1, "zb-h1", 1, "full", 1)),
    ("specs/gpt3-13b-a100-het-128.yaml", ParallelConfig(1, 4, 32, 2, 8, "zb-h1", 1, "none", 0)),
])
def test_zb_h1_later_stages_slack_as_the_replay(path, cfg):
    """ZB-H1 holds a later stage's W's back to the end, so its stages end nearly together: the data-parallel credit of
    a later row is that gap (its walked order's device ends), not 1F1B's whole last backward per stage, which put the
    last stage's exposed ring (one piece, issued after its last W) under the replay's."""
    assert abs(_gap(path, cfg)) < 0.01


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_group_across_nodes_is_scored_alike(schedule):
    """tp 8 x cp 4 spans four nodes: the replay took the first node's links only, the estimate the slowest of the
    span's side-by-side pairs (+5.8% apart before; the fuzz's case 996, +8.0%)."""
    cfg = ParallelConfig(8, 2, 16, 1, 96, schedule, 1, "selective", 1, cp=4)
    assert abs(_gap("specs/gpt3-175b-a100-het-1024.yaml", cfg)) < 1e-3


def test_block_bandwidth():
    bw = np.array([[0, 9, 5, 7], [9, 0, 8, 3], [5, 8, 0, 6], [7, 3, 6, 0]], float)
    assert block_bandwidth(bw, 1) is bw
    b2 = block_bandwidth(bw, 2)
    assert b2[0, 2] == min(bw[0, 2], bw[1, 3]) == 3
    assert b2[2, 0] == min(bw[2, 0], bw[3, 1]) == 3


def test_interleaved_sync_launched_as_megatron_core_aligns_it():
    """Megatron-Core (--overlap-grad-reduce with its default --align-grad-reduce) launches a chunk's sync
    pipeline_parallel_rank backward steps after the chunk's last backward: the replay's first sync on rank d starts no
    earlier than the end of the d-th backward step after the last chunk's (v - 1) last backward, and at it on rank 0."""
    from planner.simulator.ops import B
    spec = planner.load_spec("specs/gpt3-13b-a100-128.yaml")
    cfg = ParallelConfig(1, 4, 32, 1, 16, "interleaved", 2, "none", 1)
    sim = planner.simulate(spec, cfg)
    for d in range(cfg.pp):
        idx = np.flatnonzero((sim.op_dev == d) & (sim.op_kind == B))
        k = int(np.flatnonzero(sim.op_chunk[idx] == cfg.vpp - 1)[-1]) + d
        assert sim.dp_start[d] >= sim.op_end[idx[k]] - 1e-12
        if d == 0:
            assert sim.dp_start[d] == pytest.approx(sim.op_end[idx[k]], rel=1e-12)
