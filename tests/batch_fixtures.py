"""Small sweeps for the batch / sweep / sizing tests (inline cluster: 4 nodes x 8 A100)."""
import copy

import yaml

CLUSTER = {"name": "mini", "gpu": {"type": "A100", "memory_GiB": 80, "peak_tflops": {"bf16": 312}},
           "nodes": 4, "gpus_per_node": 8,
           "network": {"intra_node": {"bandwidth_GBps": 300}, "inter_node": {"bandwidth_Gbps": 200},
                       "bandwidth_matrix": [[0, 25, 20, 10], [25, 0, 22, 12], [20, 22, 0, 25], [10, 12, 25, 0]]},
           "price_per_gpu_hour_usd": 2.0}

SWEEP = {"name": "mini",
         "models": [{"name": "m-small", "num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16,
                     "vocab_size": 50257},
                    {"name": "m-mid", "num_layers": 16, "hidden_size": 2048, "num_attention_heads": 16,
                     "vocab_size": 50257},
                    # 100B parameters on 8 GPUs of 16 GiB: no plan fits, the row must say INFEASIBLE
                    {"name": "m-huge", "num_layers": 80, "hidden_size": 10240, "num_attention_heads": 80,
                     "vocab_size": 50257}],
         "clusters": [{"path": "mini-cluster.yaml", "gpus": [8, 16]}],
         "training": {"global_batch_size": [64], "seq_length": [1024], "tokens": [1.0e10]},
         "search": {"schedules": ["1f1b"], "recompute": ["selective", "full"], "zero": [0, 1]},
         "solver": {"time_limit_s": 1, "seed": 0}}


def write_sweep(tmp_path, sweep=None, cluster=None):
    (tmp_path / "mini-cluster.yaml").write_text(yaml.safe_dump(cluster or CLUSTER))
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(sweep or SWEEP, sort_keys=False))
    return str(p)


def sweep_dict(**changes):
    d = copy.deepcopy(SWEEP)
    d.update(changes)
    return d


def worker_threads(_item, _limit):
    """Run inside a batch worker: what thread limits does it see?"""
    import os

    import torch  # a cost model that profiles with torch would import it like this
    return {"omp": os.environ.get("OMP_NUM_THREADS"), "torch": torch.get_num_threads(), "pid": os.getpid()}


def die_on_mid(case, time_limit_s):
    """Run inside a batch worker: the process dies (as on a segfault or an OOM kill) for model m-mid."""
    import os

    from planner.batch.run import run_case
    if case.model_label == "m-mid":
        os._exit(1)
    return run_case(case, time_limit_s)


def quick_then_sleep(case, time_limit_s):
    """Run inside a batch worker: the first case answers at once, every other one solves for a minute."""
    import time

    from planner.batch.run import _base_row
    if case.model_label == "m-small" and case.gpus == 8:
        return {**_base_row(case), "status": "INFEASIBLE", "error": "stub"}
    time.sleep(60)
    return {**_base_row(case), "status": "INFEASIBLE", "error": "stub"}
