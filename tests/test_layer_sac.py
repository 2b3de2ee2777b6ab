"""`recompute: block` on a ZeRO-3 plan: torchtitan's per-layer selective checkpointing (selective_ac_option = "n",
every n-th block of a rank; pytorch/torchtitan @ 238fa9953e4aec2a62582121564273d7cbb1e9f1
distributed/activation_checkpoint.py _apply_layer_sac), its memory, time, search, export and the fake-tensor check."""
from __future__ import annotations

import dataclasses

import pytest
import tomllib

import planner
from planner.config import ParallelConfig as C
from planner.config import torchtitan_problem
from planner.costs import default_costs
from planner.costs.compute import recomputed_layers
from planner.costs.iteration import memory_limit_GiB, stage_memory, stage_times
from planner.costs.memory import (
    GiB,
    block_transient_bytes,
    chunk_stored_bytes,
    layer_transient_bytes,
    stored_layer_bytes,
    with_recompute,
)
from planner.errors import SpecError
from planner.export import megatron_args, torchtitan_toml
from planner.search.screen import block_layers
from planner.search.space import enumerate_configs, space_key


@pytest.fixture(scope="module")
def spec():
    return planner.load_spec("specs/llama3-8b-h100-fsdp-128.yaml")


def _sac(n, pp=1, dp=128, mbs=2, sched="1f1b", v=1, tp=1):
    m = 256 // (dp * mbs)
    return C(tp, pp, dp, mbs, m, sched, v, "block", 3, tp > 1, recompute_layers=n)


def test_the_counter_runs_over_a_ranks_chunks_in_build_order():
    """torchtitan increments one counter per wrapped block, then checkpoints it when counter % n == 0; a rank's
    stages are built in ascending order (rank + s * pp; V-shapes rank, 2pp - 1 - rank): our chunk order."""
    c = C(1, 2, 8, 1, 16, "interleaved", 2, "block", 3, False, recompute_layers=3)   # 32 layers: 4 chunks of 8
    assert c.layer_sac and c.chunk_layers(32) == ((8, 8), (8, 8))
    # counters 1..8 -> 3, 6 (positions 2, 5); 9..16 -> 9, 12, 15 (positions 0, 3, 6)
    assert c.checkpointed_chunk_layers(32) == (((2, 5), (0, 3, 6)), ((2, 5), (0, 3, 6)))
    assert c.recomputed_chunk_layers(32) == ((2, 3), (2, 3))
    v = C(1, 2, 8, 1, 16, "v-zb", 2, "block", 3, False, recompute_layers=5)
    assert v.checkpointed_chunk_layers(32) == (((4,), (1, 6)), ((4,), (1, 6)))
    # the same N on a ZeRO 0-2 plan is Megatron-Core's first N of each chunk
    mc = dataclasses.replace(c, zero=1)
    assert not mc.layer_sac and mc.checkpointed_chunk_layers(32) == (((0, 1, 2),) * 2,) * 2
    for pp, sched, vv in ((1, "1f1b", 1), (2, "1f1b", 1), (2, "interleaved", 2), (4, "interleaved", 4)):
        for n in range(1, 20):
            cfg = C(1, pp, 8, 1, 32 // 8 * pp, sched, vv, "block", 3, False, recompute_layers=n)
            counts = cfg.recomputed_chunk_layers(32)
            assert counts == tuple(tuple(map(len, r)) for r in cfg.checkpointed_chunk_layers(32))
            assert all(sum(r) == (32 // pp) // n for r in counts)      # floor(rank layers / n) per rank


def test_n1_is_full_and_n_past_the_rank_is_none(spec):
    """n = 1 checkpoints every block (full AC exactly); n above the rank's block count checkpoints none."""
    costs = default_costs(spec.cluster)
    m, tr = spec.model, spec.training
    for n, same in ((1, "full"), (33, "none")):
        cfg = _sac(n)
        other = with_recompute(cfg, same)
        assert chunk_stored_bytes(m, tr, cfg) == chunk_stored_bytes(m, tr, other)
        assert block_transient_bytes(m, tr, cfg, 0) == layer_transient_bytes(m, tr, other)
        assert stage_memory(spec, cfg, costs)[0].total == pytest.approx(stage_memory(spec, other, costs)[0].total,
                                                                      rel=1e-12)
        assert stage_times(spec, cfg, costs)[0].backward == pytest.approx(
            stage_times(spec, other, costs)[0].backward, rel=1e-12)


def test_memory_and_time_count_every_nth_block(spec):
    costs = default_costs(spec.cluster)
    m, tr = spec.model, spec.training
    full = stored_layer_bytes(m, tr, with_recompute(_sac(4), "full"))
    none = stored_layer_bytes(m, tr, with_recompute(_sac(4), "none"))
    assert full < none
    f_rc = stage_times(spec, with_recompute(_sac(4), "full"), costs)[0].recompute
    for n in (2, 3, 4, 5, 7, 16):
        cfg = _sac(n)
        r = 32 // n
        assert recomputed_layers(m, cfg, 0) == r
        assert chunk_stored_bytes(m, tr, cfg) == ((r * full + (32 - r) * none,),)
        assert stage_times(spec, cfg, costs)[0].recompute == pytest.approx(f_rc * r / 32, rel=1e-12)
    # working set: the chunk's last block checkpointed (32 % n == 0) holds full's; otherwise full's less the stored
    # blocks behind the last checkpointed one (n = 5: block 30 checkpointed, 31 and 32 stored), at least none's
    tf = layer_transient_bytes(m, tr, with_recompute(_sac(4), "full"))
    tn = layer_transient_bytes(m, tr, with_recompute(_sac(4), "none"))
    assert block_transient_bytes(m, tr, _sac(4), 0) == tf
    assert block_transient_bytes(m, tr, _sac(5), 0) == max(tn, tf - 2 * none)


def test_screening_picks_the_largest_n_that_fits(spec):
    """The fewest recomputed blocks that fit is the largest n that fits (time falls with n); the scan is checked
    against every n."""
    costs = default_costs(spec.cluster)
    limit = memory_limit_GiB(spec)

    def fits(cfg):
        return max(x.total for x in stage_memory(spec, cfg, costs)) / GiB <= limit

    base = dataclasses.replace(_sac(2), recompute_layers=None)
    assert not fits(dataclasses.replace(base, recompute="none"))          # 92.8 GiB: recompute is needed
    got = block_layers(spec, base, costs)
    assert got is not None and got.layer_sac and 2 <= got.recompute_layers < 32
    assert fits(got)
    assert not any(fits(_sac(n)) for n in range(got.recompute_layers + 1, 33))
    assert stage_times(spec, got, costs)[0].recompute < stage_times(spec, _sac(2), costs)[0].recompute
    # a plan that fits without recompute: block is dropped where `none` is searched
    assert block_layers(spec, dataclasses.replace(base, micro_batch_size=1, num_microbatches=2), costs) is None


def test_the_search_enumerates_zero3_block_with_n_unset(spec):
    cfgs = [c for c in enumerate_configs(spec) if c.zero == 3 and c.recompute == "block"]
    assert cfgs and all(c.recompute_layers is None for c in cfgs)
    assert space_key(_sac(4)) in set(enumerate_configs(spec))


def test_torchtitan_export_writes_the_frequency_and_megatron_refuses(spec):
    sol = {"config": _sac(4).as_dict(), "precision": "bf16", "seq_length": 8192, "num_layers": 32}
    ac = tomllib.loads(torchtitan_toml(sol))["activation_checkpoint"]
    assert ac == {"mode": "selective", "selective_ac_option": "4"}
    with pytest.raises(SpecError):
        megatron_args(sol)
    zero1 = dataclasses.replace(_sac(4, tp=2, dp=64), zero=1)           # Megatron-Core's block: no torchtitan form
    assert torchtitan_problem(zero1)[0] == "recompute"


def test_cli_estimate_carries_n(spec, capsys):
    import json

    from planner.cli.main import main
    from planner.search.solve import estimate_plan
    base = ["estimate", "specs/llama3-8b-h100-fsdp-128.yaml", "--tp", "1", "--pp", "1", "--dp", "128", "--mbs", "2",
            "--zero", "3", "--recompute", "block", "--json"]
    assert main(base + ["--recompute-layers", "4"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["recompute_layers"] == 4 and d["config"]["zero"] == 3
    assert d["estimate"]["iteration_s"] == pytest.approx(estimate_plan(spec, _sac(4))[0].iteration_s, rel=1e-9)
    assert main(base) == 2 and "--recompute-layers" in capsys.readouterr().err


@pytest.mark.parametrize("pp,sched,v,layers,n", [(1, "1f1b", 1, 4, 2), (2, "interleaved", 2, 16, 3),
                                                  (2, "interleaved", 3, 18, 2), (2, "v-zb", 2, 12, 4)])
def test_fake_tensor_blocks_keep_what_the_count_says(pp, sched, v, layers, n):
    """torch's checkpoint on a torchtitan-style block stack (a rank's chunks in build order), wrapped by torchtitan's
    counter rule: each chunk keeps its checkpointed blocks' inputs (the estimator's full-recompute layer, 2sbh) and
    its other blocks' saved tensors, as ParallelConfig.checkpointed_chunk_layers counts them. The stored (eager)
    block's bytes are the profiler's own single-block count, not the estimator's none (compiled) count."""
    from types import SimpleNamespace

    from planner.profile.torchtitan_block import layer_sac_saved_bytes
    h, a, kv, f, s = 256, 4, 1, 768, 64
    one_full = layer_sac_saved_bytes(h, a, kv, f, s, (1,), 1)[0]
    one_none = layer_sac_saved_bytes(h, a, kv, f, s, (1,), 2)[0]
    assert one_full < one_none
    model = SimpleNamespace(hidden_size=h, num_attention_heads=a, ffn_hidden_size=f, kv_channels=kv * (h // a),
                            family="llama", gated_mlp=True, num_kv_heads=kv)
    cfg = C(1, pp, 8, 1, 8, sched, v, "block", 3, False, recompute_layers=n)
    assert one_full == stored_layer_bytes(model, SimpleNamespace(seq_length=s, precision="bf16", attention="fused"),
                                          with_recompute(cfg, "full"))
    for rank in range(pp):
        chunks = cfg.chunk_layers(layers)[rank]
        counts = cfg.recomputed_chunk_layers(layers)[rank]
        got = layer_sac_saved_bytes(h, a, kv, f, s, chunks, n)
        assert got == [r * one_full + (c - r) * one_none for c, r in zip(chunks, counts)]


def test_screening_scans_where_memory_is_not_monotone_in_n(spec):
    """Interleaved v4 (chunks of 4 blocks): n = 6 ends chunk 2 with a checkpointed block (full's working set whole),
    n = 7 does not, so n = 7 peaks lower than n = 6. At a limit between the two the answer is still the largest n
    that fits, which a bisection on n would not promise."""
    costs = default_costs(spec.cluster)
    base = C(1, 2, 64, 1, 4, "interleaved", 4, "block", 3, False)

    def peak(n):
        cfg = dataclasses.replace(base, recompute_layers=n) if n else dataclasses.replace(base, recompute="none")
        return max(x.total for x in stage_memory(spec, cfg, costs)) / GiB

    assert peak(7) < peak(6)
    limit = (peak(6) + peak(7)) / 2
    assert peak(0) > limit and peak(2) <= limit
    got = block_layers(spec, base, costs, limit)
    assert got.recompute_layers == max(n for n in range(2, 17) if peak(n) <= limit)
    assert got.recompute_layers >= 7
