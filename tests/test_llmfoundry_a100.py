"""benchmarks/llmfoundry_a100.py: its row table (llm-foundry's A100 80GB MPT lines) parses, agrees with itself and with
the planner's MPT models, and every row builds a spec the planner accepts. Fast (no estimate loop, no timing, no
network); the accuracy figures are in docs/notes/compute.md, "llm-foundry's MPT table on A100 80GB"."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _module():
    spec = importlib.util.spec_from_file_location("llmfoundry_a100",
                                                  os.path.join(ROOT, "benchmarks", "llmfoundry_a100.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses resolve the module's annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


lf = _module()


def test_table_parses_with_the_source_pinned():
    rows = lf.parse_table()
    assert len(rows) == 36 and len({r.id for r in rows}) == 36
    assert len(lf.SOURCE["commit"]) == 40 and len(lf.SOURCE["knobs_commit"]) == 40
    assert {r.model for r in rows} == {"1b", "3b", "7b", "13b", "30b", "70b"}
    # the two 70B rows (PURE: bf16 reduce-scatter) are the only ones left out of the summary
    assert [r.id for r in rows if lf.excluded(r)] == ["mpt-70b-s2048-g64", "mpt-70b-s2048-g32"]


def test_the_table_reproduces_its_own_mfu_column():
    """llm-foundry's MFU formula (README "MFU") applied to each row's throughput gives its MFU column: the cells were
    read into the right fields, and the planner's MPT shapes are the run's (n_layers and d_model enter the formula)."""
    for r in lf.parse_table():
        assert lf.foundry_mfu(r, r.tokens_per_s) == pytest.approx(r.mfu / 100, abs=0.0006), r.id


def test_each_row_builds_and_counts_the_tables_parameters():
    for r in lf.parse_table():
        spec, cfg = lf.build(r)
        assert spec.model.num_params() == r.num_params, r.id           # learned positions of the row's seq included
        assert (cfg.tp, cfg.pp, cfg.dp, cfg.zero) == (1, 1, r.gpus, 3), r.id
        assert cfg.micro_batch_size * cfg.num_microbatches * cfg.dp == spec.training.global_batch_size, r.id
        assert cfg.recompute == ("full" if r.checkpointing else "none"), r.id
        assert spec.cluster.nodes * spec.cluster.gpus_per_node == r.gpus, r.id
        assert spec.training.attention == "fused" and spec.training.precision == "bf16", r.id


@pytest.mark.parametrize("bad, message", [
    ("|  7b | 2048 | 8 | a100_80gb | 64.23 |", "cells"),
    ("|  7b | 2048 | 8 | a100_80gb | 64.23 | 64.23 | 200 | 6 | 2 | 97 | 18 | 37130 | 4641 | 196608 | amp_bf16 | "
     "DEFAULT | FULL_SHARD | False | False | 6658859008 |", "gbs"),
    ("|  7b | 2048 | 8 | h100_80gb | 64.23 | 64.23 | 200 | 6 | 2 | 96 | 18 | 37130 | 4641 | 196608 | amp_bf16 | "
     "DEFAULT | FULL_SHARD | False | False | 6658859008 |", "a100_80gb"),
    ("|  7b | 2048 | 8 | a100_80gb | 64.23 | 64.23 | 200 | 6 | 2 | 96 | 18 | 37130 | 4641 | 196608 | amp_bf16 | "
     "DEFAULT | FULL_SHARD | yes | False | 6658859008 |", "True / False"),
])
def test_malformed_lines_are_refused_naming_the_line(bad, message):
    with pytest.raises(ValueError, match=message):
        lf.parse_table(bad)


def test_fa1_ratio_is_the_figures_bars():
    assert lf.fa1_over_fa2(2048) == pytest.approx(69 / 155)
    assert lf.fa1_over_fa2(65536) == pytest.approx(83 / 189)      # flat beyond 16k, as the planner's table
    assert lf.fa1_over_fa2(256) == pytest.approx(55 / 99)
