"""Plan spec: ties a model, a cluster, a training job, the search space and the solver settings."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field


from planner.config import PIPELINE_ENGINES, RECOMPUTE, SCHEDULES, ZERO_STAGES
from planner.errors import SpecError
from planner.io import load_yaml
from planner.spec.cluster import ClusterSpec, parse_cluster
from planner.spec.fields import Fields
from planner.spec.model import ModelSpec, parse_model

PRECISIONS = ("bf16", "fp16", "fp32")
METHODS = ("auto", "exact", "anneal")


@dataclass(frozen=True)
class TrainingSpec:
    global_batch_size: int
    seq_length: int
    precision: str = "bf16"
    optimizer: str = "adam"
    tokens: float | None = None           # training budget, for time / cost to train
    pipeline_engine: str = "megatron"     # megatron | deepspeed (config.PIPELINE_ENGINES): how p2p is issued


@dataclass(frozen=True)
class SearchSpec:
    schedules: tuple = ("1f1b",)
    recompute: tuple = ("none", "selective", "full")
    zero: tuple = (0, 1)
    micro_batch_sizes: tuple | None = None  # None = auto (powers of two up to 16 that divide)
    virtual_stages: tuple = (2,)            # for the interleaved schedule
    sequence_parallel: tuple = (False, True)
    tensor_parallel: tuple | None = None    # None = divisors of gpus_per_node
    memory_margin: float = 0.05             # keep this fraction of GPU memory free (soft margin)
    top_k: int = 5


@dataclass(frozen=True)
class SolverSpec:
    method: str = "auto"
    time_limit_s: float = 60.0
    seed: int = 0
    robust: str = "none"                  # none | worst | mean over the cluster's bandwidth snapshots


@dataclass(frozen=True, eq=False)
class Spec:
    name: str
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    search: SearchSpec = field(default_factory=SearchSpec)
    solver: SolverSpec = field(default_factory=SolverSpec)
    source: str | None = None
    raw: dict | None = None               # the resolved YAML, for hashing and re-writing

    def digest(self) -> str:
        blob = json.dumps(self.raw or {}, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _part(f: Fields, key: str, base: str):
    """A spec part is a path (relative to the spec) or an inline mapping."""
    v = f.raw(key)
    if isinstance(v, str):
        path = os.path.normpath(os.path.join(base, v))
        if not os.path.exists(path):
            raise f.error(key, f"file {path} does not exist")
        return load_yaml(path, f.file, field=f.path(key)), path, ""
    return v, f.file, key


def load_model(path: str) -> ModelSpec:
    return parse_model(load_yaml(path), path)


def load_cluster(path: str) -> ClusterSpec:
    return parse_cluster(load_yaml(path), path)


def load_spec(path: str) -> Spec:
    data = load_yaml(path)
    return parse_spec(data, path)


def parse_spec(data, file: str | None = None) -> Spec:
    f = Fields(data, file)
    base = os.path.dirname(file) if file else "."
    name = f.str("name", os.path.splitext(os.path.basename(file))[0] if file else "plan")
    mdata, mfile, mpre = _part(f, "model", base)
    model = parse_model(mdata, mfile, mpre)
    cdata, cfile, cpre = _part(f, "cluster", base)
    cluster = parse_cluster(cdata, cfile, cpre)
    training = _parse_training(f.sub("training"))
    search = _parse_search(f.sub("search", {}), cluster)
    solver = _parse_solver(f.sub("solver", {}))
    f.raw("description", None)
    f.done()
    if model.num_layers < 1:
        raise SpecError(mfile, "num_layers", "must be positive")
    other = [x for x in search.schedules if x != "1f1b"]
    if training.pipeline_engine == "deepspeed" and other:
        raise SpecError(file, "search.schedules", f"has {', '.join(other)}; training.pipeline_engine deepspeed "
                        "runs only its 1F1B TrainSchedule")
    if training.pipeline_engine == "deepspeed" and 2 in search.zero:
        raise SpecError(file, "search.zero", "has 2; DeepSpeed's pipeline engine supports ZeRO stages 0 and 1 only")
    raw = {"name": name, "model": mdata, "cluster": cdata, "training": data.get("training"),
           "search": data.get("search"), "solver": data.get("solver")}
    return Spec(name, model, cluster, training, search, solver, file, raw)


def _parse_training(f: Fields) -> TrainingSpec:
    t = TrainingSpec(
        global_batch_size=f.int("global_batch_size"),
        seq_length=f.int("seq_length"),
        precision=f.str("precision", "bf16", choices=PRECISIONS),
        optimizer=f.str("optimizer", "adam", choices=("adam", "adamw", "sgd")),
        tokens=f.float("tokens", None),
        pipeline_engine=f.str("pipeline_engine", "megatron", choices=PIPELINE_ENGINES),
    )
    f.done()
    return t


def _choices(f: Fields, key: str, default, allowed, cast=lambda v: v):
    vals = f.list(key, list(default))
    out = []
    for v in vals:
        try:
            v = cast(v)
        except (TypeError, ValueError):
            raise f.error(key, f"has {v!r}, expected one of {list(allowed)}") from None
        if v not in allowed:
            raise f.error(key, f"has {v!r}, expected one of {list(allowed)}")
        out.append(v)
    if not out:
        raise f.error(key, "must not be empty")
    return tuple(dict.fromkeys(out))


def _pos_ints(f: Fields, key: str, default):
    v = f.raw(key, default)
    if v is None or v == "auto":
        return None
    if not isinstance(v, list):
        v = [v]
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise f.error(key, f"must be 'auto' or a list of positive integers, got {x!r}")
    return tuple(sorted(set(v)))


def _parse_search(f: Fields, cluster: ClusterSpec) -> SearchSpec:
    s = SearchSpec(
        schedules=_choices(f, "schedules", ("1f1b",), SCHEDULES),
        recompute=_choices(f, "recompute", ("none", "selective", "full"), RECOMPUTE),
        zero=_choices(f, "zero", (0, 1), ZERO_STAGES, int),
        micro_batch_sizes=_pos_ints(f, "micro_batch_sizes", None),
        virtual_stages=_pos_ints(f, "virtual_stages", [2]) or (2,),
        sequence_parallel=_choices(f, "sequence_parallel", (False, True), (False, True)),
        tensor_parallel=_pos_ints(f, "tensor_parallel", None),
        memory_margin=f.float("memory_margin", 0.05, positive=False, min_value=0.0, max_value=0.9),
        top_k=f.int("top_k", 5),
    )
    if s.tensor_parallel:
        for t in s.tensor_parallel:
            if cluster.gpus_per_node % t:
                raise f.error("tensor_parallel", f"tp={t} does not divide gpus_per_node={cluster.gpus_per_node} "
                                                 "(tensor groups stay inside a node)")
    f.done()
    return s


def _parse_solver(f: Fields) -> SolverSpec:
    s = SolverSpec(
        method=f.str("method", "auto", choices=METHODS),
        time_limit_s=f.float("time_limit_s", 60.0),
        seed=f.int("seed", 0, min_value=0),
        robust=f.str("robust", "none", choices=("none", "worst", "mean")),
    )
    f.done()
    return s
