"""Judge the planner's iteration-time model on measured runs (vTrain's CSV format).

Every prediction goes through the planner's own model: latency.build_problem(spec, cfg, layout,
costs) scored at Megatron's rank order, so the figures judge what the planner uses to choose. Fitting the
compute model on such runs: planner.costs.compute_fit.IterationTimeFit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from planner.config import ParallelConfig
from planner.costs import Costs
from planner.costs.metrics import mape, percent_errors, spearman
from planner.errors import SpecError
from planner.io import csv_number, read_csv_rows
from planner.spec.cluster import ClusterSpec
from planner.spec.model import ModelSpec
from planner.spec.plan import OverlapSpec, SearchSpec, Spec, TrainingSpec

# vTrain's validation runs: fp16, full activation checkpointing, 1F1B, GPT-2 vocabulary
# vTrain measured with Megatron-DeepSpeed, whose GPTModelPipe runs on DeepSpeed's pipeline engine
# and overlapped no communication (DeepSpeed's engine reduces gradients after the schedule): overlap off, also
# when validated with --pipeline-engine megatron; and Megatron's unfused softmax path (the runs predate fused
# attention in Megatron-DeepSpeed's GPT). DeepSpeed's engine sends each tensor rank's 1/tp of a stage's output
# (pipe_partitioned, TrainingSpec.p2p_scatter_gather): the message the runs sent, kept when the rows are validated
# with --pipeline-engine megatron (a what-if of the schedule, not of the message size)
VTRAIN_DEFAULTS = {"precision": "fp16", "recompute": "full", "schedule": "1f1b", "vocab_size": 50257,
                   "pipeline_engine": "deepspeed", "overlap": OverlapSpec.none(), "attention": "unfused",
                   "p2p_scatter_gather": True}
COLUMNS = {"gpus": "# GPUs", "gbs": "global batch", "mbs": "micro batch", "hidden": "hidden size",
           "heads": "attention heads", "layers": "# layers", "seq": "sequence length",
           "tp": "tensor parallelism", "dp": "data parallelism", "pp": "pipeline parallelism",
           "time_ms": "iteration time (ms)"}


@dataclass(frozen=True)
class Row:
    gpus: int
    gbs: int
    mbs: int
    hidden: int
    heads: int
    layers: int
    seq: int
    tp: int
    dp: int
    pp: int
    measured_s: float
    params_B: float | None = None
    line: int = 0

    @property
    def model_key(self) -> str:
        size = f"{self.params_B:g}B" if self.params_B else f"h{self.hidden}-L{self.layers}"
        return f"{size} on {self.gpus} GPUs, batch {self.gbs}"

    def label(self) -> str:
        return f"tp{self.tp} pp{self.pp} dp{self.dp} mbs{self.mbs}"


def read_vtrain_csv(path: str) -> list[Row]:
    """Rows of a vTrain measurement file (columns named as in the vTrain repository)."""
    head, raw_rows = read_csv_rows(path)
    missing = [c for c in COLUMNS.values() if c not in head]
    if missing:
        raise SpecError(path, missing[0], "column missing (vTrain format expected)")
    rows = []
    for i, r in enumerate(raw_rows, start=2):
        vals = {k: csv_number(r.get(c), path, i, c, int) for k, c in COLUMNS.items() if k != "time_ms"}
        t = csv_number(r.get(COLUMNS["time_ms"]), path, i, COLUMNS["time_ms"]) / 1e3
        pb = (csv_number(r["Parameters (billion)"], path, i, "Parameters (billion)")
              if r.get("Parameters (billion)") else None)
        if t <= 0 or min(vals.values()) <= 0:
            raise SpecError(path, f"line {i}", "values must be positive")
        if vals["tp"] * vals["dp"] * vals["pp"] != vals["gpus"]:
            raise SpecError(path, f"line {i}", "tp*dp*pp differs from # GPUs")
        if vals["gbs"] % (vals["mbs"] * vals["dp"]):
            raise SpecError(path, f"line {i}", "global batch is not a multiple of micro batch * dp")
        rows.append(Row(**vals, measured_s=t, params_B=pb, line=i))
    if not rows:
        raise SpecError(path, None, "has no measurements")
    return rows


def row_cluster(row: Row, cluster: ClusterSpec) -> ClusterSpec | None:
    """The part of the cluster a run used: a partial node, or its first nodes (None: does not fit)."""
    g = cluster.gpus_per_node
    if row.gpus <= g:
        return replace(cluster.subset([0]), gpus_per_node=row.gpus)
    if row.gpus % g or row.gpus // g > cluster.nodes:
        return None
    return cluster.subset(list(range(row.gpus // g)))


def row_spec(row: Row, cluster: ClusterSpec, defaults: dict | None = None) -> tuple[Spec, ParallelConfig]:
    d = {**VTRAIN_DEFAULTS, **(defaults or {})}
    model = ModelSpec(name=f"gpt-h{row.hidden}-L{row.layers}", family="gpt", num_layers=row.layers,
                      hidden_size=row.hidden, num_attention_heads=row.heads, num_kv_heads=row.heads,
                      ffn_hidden_size=4 * row.hidden, vocab_size=d["vocab_size"], tied_embeddings=True,
                      max_position_embeddings=max(2048, row.seq))
    training = TrainingSpec(global_batch_size=row.gbs, seq_length=row.seq, precision=d["precision"], optimizer="adam",
                            pipeline_engine=d["pipeline_engine"], overlap=d["overlap"], attention=d["attention"],
                            p2p_scatter_gather=d["p2p_scatter_gather"],
                            grad_reduce_in_fp32=d.get("grad_reduce_in_fp32", False))
    spec = Spec(name=model.name, model=model, cluster=cluster, training=training, search=SearchSpec())
    cfg = ParallelConfig(row.tp, row.pp, row.dp, row.mbs, row.gbs // (row.mbs * row.dp), d["schedule"],
                         1, d["recompute"], 0, False)
    return spec, cfg


def unsupported_reason(row: Row, cluster: ClusterSpec) -> str | None:
    g = min(cluster.gpus_per_node, row.gpus)
    if row.tp > cluster.gpus_per_node:
        return f"tp={row.tp} spans nodes (the planner keeps tensor groups inside a node of {cluster.gpus_per_node})"
    if row_cluster(row, cluster) is None:
        if row.gpus > cluster.num_gpus:
            return f"{row.gpus} GPUs are more than {cluster.name}'s {cluster.num_gpus}"
        return f"{row.gpus} GPUs do not fit whole nodes of {cluster.name}"
    if row.layers % row.pp:
        return f"{row.layers} layers do not split evenly into {row.pp} stages"
    if g % row.tp:
        return f"tp={row.tp} does not divide {g} GPUs per node"
    return None


def supported(rows: list[Row], cluster: ClusterSpec) -> list[Row]:
    """The rows the planner can represent on `cluster` (see unsupported_reason)."""
    return [r for r in rows if unsupported_reason(r, cluster) is None]


def predict(row: Row, cluster: ClusterSpec, costs: Costs, defaults: dict | None = None) -> float:
    """The planner's iteration time for a measured run, at Megatron's rank order on the first nodes."""
    from planner.costs.iteration import build_problem, default_layout
    cl = row_cluster(row, cluster)
    spec, cfg = row_spec(row, cl, defaults)
    layout = default_layout(cfg, cl.gpus_per_node)
    problem = build_problem(spec, cfg, layout, costs)
    return problem.objective(problem.rank_order())


@dataclass
class Report:
    rows: list = field(default_factory=list)         # dicts: row, predicted_s, measured_s, error_pct
    skipped: list = field(default_factory=list)      # dicts: line, config, reason
    groups: list = field(default_factory=list)       # dicts: name, n, spearman, regret, pick, best

    @property
    def errors(self) -> np.ndarray:
        return np.array([r["error_pct"] for r in self.rows])

    @property
    def mape(self) -> float:
        return mape([r["predicted_s"] for r in self.rows], [r["measured_s"] for r in self.rows]) if self.rows \
            else float("nan")

    @property
    def max_abs_pct_error(self) -> float:
        return float(np.max(np.abs(self.errors))) if self.rows else float("nan")

    def as_dict(self) -> dict:
        def clean(x):
            return None if isinstance(x, float) and math.isnan(x) else x
        return {"mape": self.mape, "max_abs_pct_error": self.max_abs_pct_error, "n": len(self.rows),
                "median_abs_pct_error": float(np.median(np.abs(self.errors))) if self.rows else None,
                "groups": [{k: clean(v) for k, v in g.items()} for g in self.groups],
                "skipped": self.skipped,
                "rows": [{k: v for k, v in r.items() if k != "row"} | {"config": r["row"].label(),
                          "group": r["row"].model_key, "line": r["row"].line} for r in self.rows]}


def validate(rows: list[Row], cluster: ClusterSpec, costs: Costs, defaults: dict | None = None) -> Report:
    rep = Report()
    for row in rows:
        why = unsupported_reason(row, cluster)
        if why:
            rep.skipped.append({"line": row.line, "group": row.model_key, "config": row.label(), "reason": why})
            continue
        p = predict(row, cluster, costs, defaults)
        rep.rows.append({"row": row, "predicted_s": p, "measured_s": row.measured_s,
                         "error_pct": float(percent_errors(p, row.measured_s))})
    by: dict = {}
    for r in rep.rows:
        by.setdefault(r["row"].model_key, []).append(r)
    for name, rs in by.items():
        pred = [r["predicted_s"] for r in rs]
        meas = [r["measured_s"] for r in rs]
        pick = rs[int(np.argmin(pred))]
        best = min(meas)
        rep.groups.append({"name": name, "n": len(rs), "spearman": spearman(pred, meas),
                           "regret": pick["measured_s"] / best - 1.0, "pick": pick["row"].label(),
                           "best": rs[int(np.argmin(meas))]["row"].label(),
                           "mape": mape(pred, meas)})
    return rep
