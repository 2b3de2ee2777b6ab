"""Helpers several test files share (imported like batch_fixtures)."""
import contextlib
import dataclasses
import io

from planner.costs import default_costs
from planner.costs.iteration import build_problem, default_layout, evaluate
from planner.simulator import simulate


def mini_spec_dict(**over) -> dict:
    """The smallest valid spec as a YAML-like dict; top-level keys in `over` replace the defaults."""
    d = {
        "model": {"name": "m", "num_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "vocab_size": 1000},
        "cluster": {"name": "c", "gpu": {"type": "X", "memory_GiB": 16, "peak_tflops": {"bf16": 100}},
                    "nodes": 2, "gpus_per_node": 4,
                    "network": {"intra_node": {"bandwidth_GBps": 100}, "inter_node": {"bandwidth_Gbps": 100}}},
        "training": {"global_batch_size": 16, "seq_length": 128},
    }
    d.update(over)
    return d


def with_training(spec, **training):
    """`spec` with the given training fields replaced."""
    return dataclasses.replace(spec, training=dataclasses.replace(spec.training, **training))


def estimate_and_simulate(spec, cfg, **sim_kw):
    """(estimate, simulation) of `cfg` in Megatron's rank order, scored with the same costs; sim_kw go to simulate
    (e.g. async_p2p)."""
    costs = default_costs(spec.cluster)
    lay = default_layout(cfg, spec.cluster.gpus_per_node)
    prob = build_problem(spec, cfg, lay, costs)
    a = prob.rank_order()
    return evaluate(spec, cfg, prob, a, costs), simulate(spec, cfg, layout=lay, assign=a, costs=costs, **sim_kw)


def tp2_solution(**extra) -> dict:
    """A minimal solution dict (tp 2 on one node) for the exporters; `extra` adds top-level keys (precision, ...)."""
    c = {"tp": 2, "pp": 1, "dp": 1, "micro_batch_size": 1, "num_microbatches": 4, "schedule": "1f1b", "vpp": 1,
         "recompute": "none", "zero": 0, "sequence_parallel": False}
    mapping = [{"stage": 0, "tp_rank": t, "dp_rank": 0, "node": 0, "gpu": t} for t in range(2)]
    return {"config": c, "mapping": mapping, **extra}


def run_cli(argv) -> tuple[int, str, str]:
    """`planner ARGV` in this process: (exit code, stdout, stderr)."""
    from planner.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()
