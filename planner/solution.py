"""The solved plan and its record; written atomically as YAML."""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

import numpy as np

from planner.config import ParallelConfig
from planner.errors import SpecError
from planner.io import load_yaml, plain, write_yaml
from planner.mapping.problem import Layout, layouts, worker_table


@dataclass
class SolverRecord:
    method: str
    status: str               # OPTIMAL | FEASIBLE | TIME_LIMIT | INTERRUPTED (Ctrl-C: the best plan so far)
    objective: float          # seconds per iteration (estimate of the chosen plan)
    bound: float              # proven lower bound over the whole search space (seconds)
    wall_s: float
    candidates: int           # configurations enumerated
    pruned_memory: int        # rejected by the memory estimator
    pruned_bound: int         # (config, layout) pairs pruned by lower bounds without solving their mapping
    mappings_solved: int
    mappings_proved: int             # settled by CP-SAT: proved optimal, or proved unable to beat the incumbent
    mapping_objective: float = 0.0   # the part of the objective the mapping decides (seconds)
    mapping_bound: float = 0.0
    note: str = ""
    robust: str = "none"             # objective over bandwidth snapshots: none | worst | mean
    stopped_by: str = "work"         # what ended the search: proof | work (the budget: deterministic) | wall
    #                                  (the wall-clock safety stop: the plan may depend on the machine's load)
    work_s: float = 0.0              # work seconds spent (planner/mapping/work.py: deterministic, unlike wall_s)
    snapshots: int = 0               # robust only: the bandwidth snapshots the objective is taken over
    walks_dropped: bool = False      # the plan's hops charged at the typical hop: their walks were over the search's
    #                                  allowance (costs.iteration.build_problems; the note says so)

    @property
    def gap(self) -> float:
        return max(0.0, (self.objective - self.bound) / self.objective) if self.objective else 0.0

    @property
    def mapping_gap(self) -> float:
        """The gap of the part of the objective the mapping decides (the iteration gap divides the same
        difference by the whole iteration, so a large compute constant hides a loose mapping bound)."""
        m = self.mapping_objective
        return max(0.0, (m - self.mapping_bound) / m) if m > 0 else 0.0

    @property
    def robust_over(self) -> str:
        """Robust solutions: which figures are over the snapshots and which on the cluster's matrix."""
        n = f"{self.snapshots} " if self.snapshots else ""
        return (f"objective, bound, mapping_* and the alternatives: the {self.robust} over the {n}bandwidth snapshots "
                "(network.bandwidth_snapshots); estimate and simulated: the cluster's own matrix (network.bandwidth), "
                "as planner estimate --mapping and planner simulate compute them")

    def as_dict(self) -> dict:
        return {"method": self.method, "status": self.status, "objective": self.objective, "bound": self.bound,
                "gap": self.gap, "wall_s": self.wall_s, "candidates": self.candidates,
                "pruned_memory": self.pruned_memory, "pruned_bound": self.pruned_bound,
                "mappings_solved": self.mappings_solved, "mappings_proved": self.mappings_proved,
                "mapping_objective_s": self.mapping_objective, "mapping_bound_s": self.mapping_bound,
                "mapping_gap": self.mapping_gap, "stopped_by": self.stopped_by, "work_s": round(self.work_s, 6),
                **({"robust": self.robust, "snapshots": self.snapshots, "robust_over": self.robust_over}
                   if self.robust != "none" else {}),
                **({"walks_dropped": True} if self.walks_dropped else {}),
                **({"note": self.note} if self.note else {})}


@dataclass
class Solution:
    spec: object
    config: ParallelConfig
    layout: Layout
    assign: np.ndarray
    nodes: np.ndarray
    estimate: object
    solver: SolverRecord
    alternatives: list = field(default_factory=list)
    simulated: dict | None = None
    node_ids: np.ndarray | None = None     # original node index of each node of spec.cluster (re-plans)
    extra: dict = field(default_factory=dict)

    @property
    def mapping(self) -> list[dict]:
        table = worker_table(self.layout, self.assign, self.config.tp, self.nodes, self.config.cp)
        names = self.spec.cluster.node_names
        for w in table:
            if names:
                w["host"] = names[w["node"]]
            if self.node_ids is not None:
                w["node"] = int(self.node_ids[w["node"]])
        return table

    def _node_id(self, k: int) -> int:
        n = int(self.nodes[k])
        return int(self.node_ids[n]) if self.node_ids is not None else n

    def _cp_comm(self) -> dict:
        """cp > 1 only: the exchange the plan runs (training.cp_comm, auto resolved), for export's --cp-comm-type."""
        if self.config.cp == 1:
            return {}
        from planner.costs import default_costs
        from planner.costs.context_parallel import cp_mode
        return {"cp_comm": cp_mode(self.spec, self.config, default_costs(self.spec.cluster))}

    def as_dict(self) -> dict:
        from planner import __version__
        est = estimate_dict(self.spec, self.estimate)
        return plain({
            "planner_version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "spec": self.spec.source,
            "spec_hash": self.spec.digest(),
            "name": self.spec.name,
            "config": self.config.as_dict(),
            "pipeline_engine": self.spec.training.pipeline_engine,
            # export's precision flags (--bf16 / --fp16, Transformer Engine's for fp8); until Nov 26 only fp8 was
            # recorded, so export assumes bf16 (and says so) for a solution without it
            "precision": self.spec.training.precision,
            # fp32 gradient buffer and reduction (the memory and the DP time assume it); absent: 16-bit, as before
            **({"grad_reduce_in_fp32": True} if self.spec.training.grad_reduce_in_fp32 else {}),
            # Transformer Engine's key: not a ZeRO-3 (torchao) plan's, which is costed without it
            **({"fp8_param_gather": True} if self.spec.training.fp8_param_gather and self.config.zero != 3 else {}),
            # current scaling (export's --fp8-recipe); delayed, the default: absent, as before
            **({"fp8_recipe": self.spec.training.fp8_recipe}
               if self.spec.training.precision == "fp8" and self.spec.training.fp8_recipe != "delayed" else {}),
            # the unfused softmax path (stated, or a GPU without fused kernels: spec.plan.attention_in_force), for
            # export (Megatron-LM's --transformer-impl local on pre-Ampere GPUs); fused, the default: absent, as before
            **({"attention": self.spec.training.attention} if self.spec.training.attention != "fused" else {}),
            # a fused kernel the spec names (export passes it on); auto: absent, as before
            **({"attention_backend": self.spec.training.attention_backend}
               if self.spec.training.attention_backend != "auto" else {}),
            # training.overlap as it runs on this GPU (no userbuffers before Ampere), for export's flags
            "overlap": dict(vars(_tp_comm_in_force(self.spec))),
            # a p2p message rule other than the engine's own (Megatron-LM 2021-22's scatter-gather on megatron): the
            # p2p time assumes it, so export says so; the engine's default: absent
            **({"p2p_scatter_gather": bool(self.spec.training.p2p_scatter_gather)}
               if self.spec.training.p2p_scatter_gather is not None
               and bool(self.spec.training.p2p_scatter_gather) != (self.spec.training.pipeline_engine == "deepspeed")
               else {}),
            **self._cp_comm(),
            # ZeRO-3 plans (torchtitan's FSDP2): what its job config needs beyond the parallel config; every plan:
            # seq_length and num_layers
            **({"framework": "torchtitan", "precision": self.spec.training.precision,
                "seq_length": self.spec.training.seq_length, "num_layers": self.spec.model.num_layers,
                # eager: torchtitan without torch.compile (training.kernels); fp8: torchao's Float8 all-gather
                **({"kernels": "eager"} if self.spec.training.kernels == "eager" else {}),
                **({"fsdp_float8_all_gather": True} if self.spec.training.fsdp_float8_all_gather else {}),
                **({"compile_loss": False} if not self.spec.training.compile_loss else {})}
               # other plans record the two figures too (export --format torchtitan of a DDP plan needs seq_len and
               # any pipeline split the layer count); in this branch so ZeRO-3 files keep their key order
               if self.config.zero == 3 else {"seq_length": self.spec.training.seq_length,
                                              "num_layers": self.spec.model.num_layers}),
            "layout": {"stages_per_node": self.layout.a, "replicas_per_node": self.layout.b,
                       # a tp x cp group wider than a node: each block on this many nodes from its grid entry on
                       **({"nodes_per_block": self.layout.span} if self.layout.span > 1 else {}),
                       "node_grid": [[int(self._node_id(k)) for k in row] for row in self.assign]},
            "mapping": self.mapping,
            "estimate": est,
            "simulated": self.simulated,
            "solver": self.solver.as_dict(),
            "alternatives": self.alternatives,
            **self.extra,
        })

    def write(self, path: str) -> None:
        write_yaml(path, self.as_dict())


def estimate_dict(spec, est) -> dict:
    """A solution's (and `estimate --json`'s) `estimate`: Estimate.as_dict with, after `mfu` (the full s x s attention
    counted, as NeMo 24.07), `mfu_causal`: the same run with the attention counted causally, as Megatron-Bridge 26.02
    (added Nov 26 2026; older files lack it)."""
    out = {}
    for k, v in est.as_dict().items():
        out[k] = v
        if k == "mfu":
            out["mfu_causal"] = spec.model.causal_mfu(spec.training.seq_length, est.mfu)
    return out


def _tp_comm_in_force(spec):
    from planner.costs.iteration import tp_comm_in_force  # late: costs imports this module's neighbours
    return tp_comm_in_force(spec)


def mapping_to_assign(workers: list[dict], cfg: ParallelConfig, gpus_per_node: int, nodes: int,
                      file: str | None = None) -> tuple[Layout, np.ndarray]:
    """Recover the block layout and node grid from a worker table (a solution's `mapping`)."""
    where = {}
    for k, w in enumerate(workers):
        try:
            key = (int(w["stage"]), int(w["dp_rank"]), int(w["tp_rank"]), int(w.get("cp_rank", 0)))
            where[key] = int(w["node"])
        except (KeyError, TypeError, ValueError):
            raise SpecError(file, f"mapping[{k}]", "needs integer stage, tp_rank, dp_rank and node") from None
        for name, v, n in zip(("stage", "dp_rank", "tp_rank", "cp_rank"), key, (cfg.pp, cfg.dp, cfg.tp, cfg.cp)):
            if not 0 <= v < n:
                degree = {"stage": "pp", "dp_rank": "dp", "tp_rank": "tp", "cp_rank": "cp"}[name]
                raise SpecError(file, f"mapping[{k}].{name}", f"is {v}, outside the config's {degree}={n}: the "
                                                              "mapping belongs to another plan")
    expected = cfg.pp * cfg.dp * cfg.tp * cfg.cp
    if len(where) != expected:
        raise SpecError(file, "mapping", f"has {len(where)} distinct workers, the config needs {expected}")
    for lay in layouts(cfg.tp * cfg.cp, cfg.pp, cfg.dp, gpus_per_node, cfg.dp_shard):
        grid = np.full((lay.rows, lay.cols), -1)
        ok = True
        # GPUs of a block on each of its nodes, as worker_table writes them (a = b = 1: the tp x cp group fills its
        # span nodes)
        per_node = lay.a * lay.b * cfg.tp * cfg.cp // lay.span if lay.span > 1 else None
        for (s, d, t, c), n in where.items():
            i, j = s // lay.a, d // lay.b
            if per_node:        # a block on `span` nodes: block index = its first node / span, in rank order
                k, r = divmod(n, lay.span)
                if r != (t + cfg.tp * c) // per_node:
                    ok = False
                    break
                n = k
            if grid[i, j] == -1:
                grid[i, j] = n
            elif grid[i, j] != n:
                ok = False
                break
        if ok and len(set(grid.ravel().tolist())) == grid.size and grid.min() >= 0 and grid.max() < nodes // lay.span:
            return lay, grid
    raise SpecError(file, "mapping", "is not node-blocked: every node must hold whole tensor groups of "
                                     "a stages x b replicas (see docs/ARCHITECTURE.md, Mapping)")


def solution_spec_path(raw: dict, path: str) -> str:
    """The spec file a solution names, as written, or relative to the solution's folder or the folder above it (a
    solution in solutions/ names specs/...); SpecError naming the field when none exists."""
    import os
    sp = raw.get("spec")
    if isinstance(sp, dict):
        sp = sp.get("path") or sp.get("file")
    if not isinstance(sp, str) or not sp:
        raise SpecError(path, "spec", "names no spec file; pass --spec")
    here = os.path.dirname(os.path.abspath(path))
    found = next((c for c in (sp, os.path.join(here, sp), os.path.join(os.path.dirname(here), sp))
                  if os.path.exists(c)), None)
    if found is None:
        raise SpecError(path, "spec", f"{sp} not found (tried relative to the working folder and the solution); "
                                      "pass --spec")
    return found


def load_solution(path: str) -> dict:
    d = load_yaml(path, finite=False)      # a solution records figures; its config is parsed strictly
    if not isinstance(d, dict) or "config" not in d:
        raise SpecError(path, "config", "is required (is this a solution file?)")
    return d
