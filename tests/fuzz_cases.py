"""Mutated inputs for tests/test_fuzz.py and benchmarks/fuzz_inputs.py.

One small valid set of files (spec -> model, cluster -> bandwidth matrix CSV) and single mutations of
it: a leaf of one YAML file replaced by a hostile value or deleted, an unknown key added, or one
matrix cell / row spoiled. `judge` says what a run of the CLI on a mutant must not do.
"""
from __future__ import annotations

import copy
import math
import os
import re
from dataclasses import dataclass

import numpy as np
import yaml

MODEL = {"name": "fuzz-gpt", "family": "gpt", "num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16,
         "num_kv_heads": 16, "ffn_hidden_size": 4096, "vocab_size": 32000, "tied_embeddings": True,
         "max_position_embeddings": 2048}
CLUSTER = {"name": "fuzz-4x8", "gpu": {"type": "A100-SXM4-80GB", "memory_GiB": 80,
                                       "peak_tflops": {"bf16": 312, "fp16": 312, "fp32": 19.5}},
           "nodes": 4, "gpus_per_node": 8,
           "network": {"intra_node": {"bandwidth_GBps": 300, "latency_us": 3},
                       "inter_node": {"bandwidth_Gbps": 200, "nics_per_node": 8, "latency_us": 5},
                       "bandwidth_matrix": "fuzz.bandwidth.csv", "node_names": ["n0", "n1", "n2", "n3"]},
           "price_per_gpu_hour_usd": 2.0}
SPEC = {"model": "../models/fuzz.yaml", "cluster": "../clusters/fuzz.yaml",
        "training": {"global_batch_size": 64, "seq_length": 1024, "precision": "bf16", "optimizer": "adam"},
        "search": {"schedules": ["1f1b"], "recompute": ["none", "selective"], "zero": [0, 1],
                   "micro_batch_sizes": [1, 2], "memory_margin": 0.05},
        "solver": {"method": "auto", "time_limit_s": 2, "seed": 0}}
MATRIX = np.array([[0, 20.1, 19.5, 18.0], [20.3, 0, 21.0, 17.5], [19.9, 20.8, 0, 12.0], [18.2, 17.0, 11.5, 0]])

FILES = {"spec": "specs/fuzz.yaml", "model": "models/fuzz.yaml", "cluster": "clusters/fuzz.yaml",
         "matrix": "clusters/fuzz.bandwidth.csv"}
HOSTILE = [float("nan"), float("inf"), float("-inf"), -1, 0, 2**70, -(2**70), True, False, "abc", "", [], {},
           None, 1e308, 1e-308, 0.5, 7, [[[[1]]]], {"x": 1}, "n$(touch pwned)x"]
CELLS = ["nan", "inf", "-inf", "-3", "0", "x", "", "1e400", "1,2"]


@dataclass(frozen=True)
class Mutation:
    target: str                 # spec | model | cluster | matrix
    where: str                  # dotted field path, or "[i,j]" / "row i" for the matrix
    value: object               # what was put there ("<deleted>", "<unknown key>")

    @property
    def non_finite(self) -> bool:
        if self.target == "matrix":
            return str(self.value).strip().lower() in ("nan", "inf", "-inf", "1e400")
        return isinstance(self.value, float) and not math.isfinite(self.value)

    @property
    def out_of_range(self) -> bool:
        """A number no field accepts (the provenance record network.generator is not read; a host name
        may be all digits)."""
        if self.target == "matrix" or "generator" in self.where or "node_names" in self.where:
            return False
        v = self.value
        return (isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**31) or (
            isinstance(v, float) and math.isfinite(v) and abs(v) > 1e15)

    @property
    def file(self) -> str:
        return FILES[self.target]

    def __str__(self) -> str:
        return f"{self.target}:{self.where}={self.value!r}"


def _leaves(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, (*prefix, i))
    if prefix:
        yield prefix


def _set(obj, path, value):
    for k in path[:-1]:
        obj = obj[k]
    if value == "<deleted>":
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


def mutations(rng: np.random.Generator, n: int) -> list[Mutation]:
    """n random single mutations (seeded: the same rng state gives the same list)."""
    docs = {"spec": SPEC, "model": MODEL, "cluster": CLUSTER}
    paths = {t: list(_leaves(d)) for t, d in docs.items()}
    out = []
    while len(out) < n:
        target = ["spec", "model", "cluster", "matrix"][int(rng.integers(4))]
        if target == "matrix":
            i, j = (int(v) for v in rng.integers(4, size=2))
            if rng.random() < 0.15:
                out.append(Mutation("matrix", f"row {i}", "<deleted>"))
            else:
                out.append(Mutation("matrix", f"[{i},{j}]", CELLS[int(rng.integers(len(CELLS)))]))
            continue
        path = paths[target][int(rng.integers(len(paths[target])))]
        r = rng.random()
        if r < 0.1:
            value = "<deleted>"
        elif r < 0.15:
            out.append(Mutation(target, ".".join(map(str, path[:-1] or ("",))) + ".bogus_key", "<unknown key>"))
            continue
        else:
            value = HOSTILE[int(rng.integers(len(HOSTILE)))]
        out.append(Mutation(target, ".".join(map(str, path)), value))
    return out


def write_case(root: str, mutation: Mutation | None = None) -> str:
    """Write the file set under root with the mutation applied; returns the spec's path."""
    docs = {"spec": copy.deepcopy(SPEC), "model": copy.deepcopy(MODEL), "cluster": copy.deepcopy(CLUSTER)}
    rows = [[f"{v:.2f}" for v in row] for row in MATRIX]
    m = mutation
    if m is not None and m.target == "matrix":
        if m.value == "<deleted>":
            del rows[int(m.where.split()[1])]
        else:
            i, j = (int(v) for v in m.where.strip("[]").split(","))
            rows[i][j] = str(m.value)
    elif m is not None:
        if m.value == "<unknown key>":
            parent = m.where.rsplit(".", 1)[0]
            path = tuple(int(p) if p.isdigit() else p for p in parent.split(".") if p)
            obj = docs[m.target]
            for k in path:
                obj = obj[k]
            if isinstance(obj, dict):
                obj["bogus_key"] = 1
        else:
            path = tuple(int(p) if p.isdigit() else p for p in m.where.split("."))
            _set(docs[m.target], path, m.value)
    for target, rel in FILES.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as fh:
            if target == "matrix":
                fh.write("\n".join(",".join(r) for r in rows) + "\n")
            else:
                yaml.safe_dump(docs[target], fh, sort_keys=False)
    return os.path.join(root, FILES["spec"])


# the plan `estimate` is asked for on every case (valid for the unmutated files)
ESTIMATE = ["--tp", "1", "--pp", "2", "--dp", "16", "--mbs", "1", "--json"]


def run_cli(argv: list[str]) -> tuple[int, str]:
    """The CLI's main() in process: (exit code, what it printed on stderr)."""
    import contextlib
    import io

    from planner.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, err.getvalue()


def judge(mutation: Mutation | None, rc: int, err: str) -> list[str]:
    """What went wrong in one run: internal error, traceback, a result from non-finite input, or a
    bad-input message that does not name the file."""
    bad = []
    if rc not in (0, 1, 2, 130):
        bad.append(f"exit {rc}")
    if "Traceback" in err:
        bad.append("traceback")
    if mutation is not None and mutation.non_finite and rc == 0:
        bad.append("exit 0 from a non-finite input")
    if mutation is not None and mutation.out_of_range and rc == 0:
        bad.append("exit 0 from an out-of-range input")
    names_flag = re.search(r"error: --[a-z-]+(/--[a-z-]+)*:", err)     # a command-line flag it contradicts
    if (rc == 2 and mutation is not None and os.path.basename(mutation.file) not in err and "usage:" not in err
            and not names_flag):
        bad.append(f"message does not name {os.path.basename(mutation.file)} or a flag")
    return bad
