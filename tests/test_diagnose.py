"""An infeasible spec names the divisibility rule that binds and the nearest values that work."""
from planner.search.diagnose import why_no_config
from planner.search.space import enumerate_configs


def test_batch_seven_with_micro_batches_two_and_four(make_spec):
    spec = make_spec(nodes=2, gbs=7, micro_batch_sizes=[2, 4], schedules=["1f1b"], recompute=["none"], zero=[0])
    assert not list(enumerate_configs(spec))
    msg = why_no_config(spec)
    assert "must divide the global batch 7" in msg
    assert "no micro-batch size in [2, 4] divides the 7 samples" in msg
    assert "training.global_batch_size 6 or 8" in msg and "micro_batch_sizes: auto" in msg


def test_seven_gpu_nodes(make_spec):
    # even splits only: with uneven first / last stages 24 layers split over pp 7 (2 + 5 x 4 + 2)
    spec = make_spec(nodes=2, gpn=7, layers=24, gbs=64, schedules=["1f1b"], recompute=["none"], zero=[0],
                     uneven_stages="none")
    msg = why_no_config(spec)
    assert "2 nodes x 7" in msg
    assert "pp=7 must divide the 24 layers" in msg and "tp=7 must divide the 16 heads" in msg
    assert "model.num_layers 21 or 28" in msg
    # each value it proposes really gives a configuration
    from dataclasses import replace
    for layers in (21, 28):
        assert list(enumerate_configs(replace(spec, model=replace(spec.model, num_layers=layers))))


def test_seven_gpu_nodes_uneven_split_is_a_configuration(make_spec):
    spec = make_spec(nodes=2, gpn=7, layers=24, gbs=64, schedules=["1f1b"], recompute=["none"], zero=[0])
    cfgs = [c for c in enumerate_configs(spec) if c.pp == 7]
    assert cfgs and all(c.stage_layers(24) == (2, 4, 4, 4, 4, 4, 2) for c in cfgs)


def test_solve_raises_the_diagnosis(make_spec):
    import pytest

    from planner.errors import InfeasibleError
    from planner.search.solve import solve
    spec = make_spec(nodes=2, gbs=7, micro_batch_sizes=[2, 4], schedules=["1f1b"], recompute=["none"], zero=[0])
    with pytest.raises(InfeasibleError, match="training.global_batch_size 6 or 8"):
        solve(spec, time_limit_s=2)


def test_a_refused_context_parallel_degree_is_named():
    """Every cp of search.context_parallel refused for the searched tp (here TE's a2a with 1 local kv head): the
    message says so instead of an empty rule list."""
    from planner.spec.plan import parse_spec
    d = {"model": {"name": "m", "family": "llama", "num_layers": 8, "hidden_size": 4096, "num_attention_heads": 32,
                   "num_kv_heads": 8, "ffn_hidden_size": 14336, "vocab_size": 128256},
         "cluster": {"name": "h", "gpu": {"type": "H100-SXM5-80GB", "memory_GiB": 80, "peak_tflops": {"bf16": 989}},
                     "nodes": 2, "gpus_per_node": 8,
                     "network": {"intra_node": {"bandwidth_GBps": 450}, "inter_node": {"bandwidth_Gbps": 400}}},
         "training": {"global_batch_size": 16, "seq_length": 8192, "cp_comm": "all_to_all"},
         "search": {"schedules": ["1f1b"], "recompute": ["full"], "zero": [1], "micro_batch_sizes": [1],
                    "tensor_parallel": [8], "context_parallel": [2]}}
    spec = parse_spec(d, "a2a.yaml")
    assert not list(enumerate_configs(spec))
    msg = why_no_config(spec)
    assert "cp=2: training.cp_comm all_to_all needs the 4 local heads and 1 local kv heads (tp=8)" in msg
    d["search"]["context_parallel"] = [1, 2]          # cp = 1 searched: configurations exist, no cp rule
    assert list(enumerate_configs(parse_spec(d, "a2a.yaml")))


def test_a_pipeline_degree_that_divides_no_gpu_count_is_named(make_spec):
    """search.pipeline_parallel [5] on 16 GPUs: no (tp, pp, dp) has pp 5, so the message names the key and its
    degree instead of a closest triple (pp 1) whose rule list is empty, and proposes `auto`."""
    spec = make_spec(nodes=2, schedules=["1f1b"], recompute=["none"], zero=[0], pipeline_parallel=[5])
    assert not list(enumerate_configs(spec))
    msg = why_no_config(spec)
    assert "search.pipeline_parallel [5]: pp=5 divides none of the 16, 8, 4, 2 GPUs left by tp 1 / 2 / 4 / 8" in msg
    assert ": \n" not in msg and not msg.rstrip().endswith(":")
    assert "search.pipeline_parallel: auto" in msg


def test_the_closest_triples_keep_to_search_pipeline_parallel(make_spec):
    """pp 2 does not divide 25 layers (even splits only): the closest triples are pp 2's, with that rule named, not
    a pp 1 triple the search never tries."""
    spec = make_spec(nodes=2, layers=25, schedules=["1f1b"], recompute=["none"], zero=[0], pipeline_parallel=[2],
                     uneven_stages="none")
    assert not list(enumerate_configs(spec))
    msg = why_no_config(spec)
    closest = [ln for ln in msg.splitlines() if ln.startswith("  tp=")]
    assert closest and all(" pp=2 " in ln and "pp=2 must divide the 25 layers" in ln for ln in closest)
    assert "search.pipeline_parallel: auto" in msg


def test_a_tensor_degree_that_divides_no_heads_proposes_auto(make_spec):
    """search.tensor_parallel [8] with 20 heads: tp 8 breaks the heads rule and auto (tp 1, 2 or 4) has a
    configuration, so the message proposes it rather than 'none found'."""
    spec = make_spec(nodes=2, heads=20, hidden=2560, schedules=["1f1b"], recompute=["none"], zero=[0],
                     tensor_parallel=[8])
    assert not list(enumerate_configs(spec))
    msg = why_no_config(spec)
    assert "tp=8 must divide the 20 heads" in msg
    assert "search.tensor_parallel: auto" in msg and "none found" not in msg
