import hashlib
import os

# One OpenBLAS thread, set before numpy loads its BLAS (a value set outside wins). The suite's matrices are small; on
# two cores a second BLAS thread, spinning between calls, takes the CPU from the test itself: the default run took
# ~225 s with two threads and ~205-220 s with one on quiet cores, and under load the learned-memory validation ran
# 3-4x slower with two. Results are the same. The README runs the suite with pytest-xdist (-n auto: one worker per
# core), which this keeps from oversubscribing the cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import pytest

from planner.mapping.bruteforce import brute_force, int_objectives
from planner.spec import parse_spec


def tiny_spec(nodes=4, gpn=8, seed=0, layers=24, hidden=2048, heads=16, gbs=64, memory=80, spread=(0.3, 1.0),
              **search):
    rng = np.random.default_rng(seed)
    bw = 25 * rng.uniform(*spread, size=(nodes, nodes))
    np.fill_diagonal(bw, 0)
    d = {"model": {"name": "m", "num_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
                   "vocab_size": 50257},
         "cluster": {"name": "c", "gpu": {"type": "A100", "memory_GiB": memory,
                                             "peak_tflops": {"bf16": 312, "fp16": 312, "fp32": 19.5}},
                     "nodes": nodes, "gpus_per_node": gpn,
                     "network": {"intra_node": {"bandwidth_GBps": 300}, "inter_node": {"bandwidth_Gbps": 200},
                                 "bandwidth_matrix": bw.tolist()}},
         "training": {"global_batch_size": gbs, "seq_length": 2048},
         "search": search or {"schedules": ["1f1b"], "recompute": ["selective"], "zero": [0]},
         "solver": {"time_limit_s": 20}}
    return parse_spec(d, "tiny.yaml")


@pytest.fixture
def make_spec():
    return tiny_spec


def random_costs(n_range, k_range, trials=40, seed=0):
    """Random symmetric pair-cost matrices (zero diagonal) with a ring size k <= n: (n, k, cost) per trial."""
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        n, k = int(rng.integers(*n_range)), int(rng.integers(*k_range))
        if k > n:
            continue
        c = rng.uniform(1, 10, size=(n, n))
        c = np.maximum(c, c.T)
        np.fill_diagonal(c, 0)
        yield n, k, c


@pytest.fixture
def costs_cases():
    return random_costs


def scaled_snapshots(bandwidth, k, lo, hi, rng):
    """k bandwidth snapshots: every directed link of `bandwidth` scaled by its own U[lo, hi] factor."""
    out = []
    for _ in range(k):
        m = bandwidth * rng.uniform(lo, hi, size=bandwidth.shape)
        np.fill_diagonal(m, 0)
        out.append(m)
    return out


@pytest.fixture
def make_snapshots():
    return scaled_snapshots


def problem_key(prob) -> str:
    """A digest of everything a mapping problem's objective depends on (problems are rebuilt per test)."""
    h = hashlib.sha1(repr((prob.layout, prob.n, float(prob.const))).encode())
    for arr in (prob.nodes, prob.hop, prob.wrap, prob.dp_base, prob.dp_link, prob.emb):
        h.update(b"-" if arr is None else np.ascontiguousarray(arr).tobytes())
    pc = getattr(prob, "pace", None)
    h.update(b"-" if pc is None else repr((pc.weight, pc.base, pc.e.tolist(), pc.f.tolist(), pc.lin)).encode()
             + np.ascontiguousarray(pc.c).tobytes())
    return h.hexdigest()


def _read_only(*arrays):
    for a in arrays:
        a.flags.writeable = False


@pytest.fixture(scope="session")
def optimum():
    """brute_force(problems, robust) computed once per session for each instance (several tests need the
    same instance's optimum). The placement returned is read-only."""
    cache = {}

    def get(problems, robust="worst"):
        probs = problems if isinstance(problems, list) else [problems]
        key = (tuple(problem_key(p) for p in probs), robust)
        if key not in cache:
            best, best_a = brute_force(probs, robust)
            _read_only(best_a)
            cache[key] = (best, best_a)
        return cache[key]
    return get


@pytest.fixture(scope="session")
def int_values():
    """Every placement's integer objective and the placements (bruteforce.int_objectives), once per instance."""
    cache = {}

    def get(prob):
        key = problem_key(prob)
        if key not in cache:
            vals, P = int_objectives(prob)
            _read_only(vals)
            cache[key] = (vals, P)
        return cache[key]
    return get
