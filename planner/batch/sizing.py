"""Cost and time to train, cheapest vs fastest plan, and compute-optimal model sizing.

Time to train a token budget D with a plan of throughput X tokens/s on G GPUs:
days = D / X / 86400, GPU-hours = G * D / X / 3600, dollars = GPU-hours * price per GPU-hour.
Throughput is the *achieved* tokens/s of the solved plan (its estimate), not peak FLOPs.

Compute-optimal sizing (vTrain case study 3): for a budget of B GPU-days on G GPUs, the largest
Chinchilla-optimal model (tokens = 20 x parameters, Hoffmann et al. 2022) that trains within B.
Each candidate size is a shape from the sweep's shape rule (planner.sweep.shape_for_params),
solved for its best plan; the needed GPU-days G * 20 N / X(N) / 86400 grow roughly as N^2, so
we bracket and bisect over a log grid of sizes, then probe the next sizes above the answer
because X(N) comes from a discrete search and is not exactly monotone.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

from planner.batch.sweep import CHINCHILLA_TOKENS_PER_PARAM, ShapeRule, shape_for_params
from planner.errors import InfeasibleError, SpecError
from planner.spec.plan import SearchSpec, SolverSpec, Spec, TrainingSpec

SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class TrainCost:
    days: float
    gpu_hours: float
    dollars: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def train_cost(tokens: float, tokens_per_s: float, gpus: int, price_per_gpu_hour_usd: float | None) -> TrainCost:
    """Wall days, GPU-hours and dollars to train `tokens` at `tokens_per_s` on `gpus` GPUs."""
    if tokens_per_s <= 0:
        raise ValueError("tokens_per_s must be positive")
    seconds = tokens / tokens_per_s
    gpu_hours = gpus * seconds / 3600.0
    dollars = gpu_hours * price_per_gpu_hour_usd if price_per_gpu_hour_usd is not None else None
    return TrainCost(seconds / SECONDS_PER_DAY, gpu_hours, dollars)


def chinchilla_gpu_days(params: float, tokens_per_s: float, gpus: int) -> float:
    """GPU-days to train a `params` model on 20 x params tokens at the given throughput."""
    return gpus * CHINCHILLA_TOKENS_PER_PARAM * params / tokens_per_s / SECONDS_PER_DAY


def cheapest_vs_fastest(rows: list[dict]) -> list[dict]:
    """Per model (and batch, sequence length, token budget): the fastest plan and the cheapest plan
    over every cluster and GPU count in the rows (vTrain case study 1). Cheapest is by dollars when
    every candidate is priced, otherwise by GPU-hours."""
    groups: dict = {}
    for r in rows:
        if r.get("status") not in ("OPTIMAL", "FEASIBLE", "TIME_LIMIT") or not _num(r.get("train_days")):
            continue
        key = (r["model"], r["global_batch_size"], r["seq_length"], r["tokens"])
        groups.setdefault(key, []).append(r)
    out = []
    for (model, gbs, seq, tokens), rs in groups.items():
        fastest = min(rs, key=lambda r: (float(r["train_days"]), r["case_id"]))
        priced = all(_num(r.get("cost_usd")) for r in rs)
        metric = "cost_usd" if priced else "gpu_hours"
        cheapest = min(rs, key=lambda r: (float(r[metric]), r["case_id"]))
        out.append({"model": model, "params": rs[0]["params"], "global_batch_size": gbs, "seq_length": seq,
                    "tokens": tokens, "options": len(rs), "cheapest_by": metric,
                    "fastest": _pick(fastest), "cheapest": _pick(cheapest)})
    return out


def _pick(r: dict) -> dict:
    keys = ("case_id", "cluster", "gpus", "tp", "pp", "dp", "tokens_per_s", "mfu", "train_days", "gpu_hours",
            "cost_usd")
    return {k: r.get(k) for k in keys}


def _num(v) -> bool:
    if v is None or v == "":
        return False
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


@dataclass
class SizingPoint:
    params: int
    model: str
    num_layers: int
    hidden_size: int
    status: str                         # plan status, or INFEASIBLE
    tokens_per_s: float | None = None
    mfu: float | None = None
    gpu_days: float | None = None       # Chinchilla-optimal GPU-days at the achieved throughput
    config: str | None = None
    within_budget: bool = False


@dataclass
class SizingResult:
    cluster: str
    gpus: int
    budget_gpu_days: float
    best: SizingPoint | None            # largest model within budget (None: not even the smallest)
    points: list = field(default_factory=list)   # every size solved, in the order solved
    wall_s: float = 0.0
    price_per_gpu_hour_usd: float | None = None

    @property
    def limited_by(self) -> str | None:
        """What stopped the answer from being larger: `budget` (the next size solved is over it), `memory` (the
        next size solved has no plan that fits the GPUs, and at the answer's throughput per parameter it would have
        been within the budget) or `grid` (the largest size of the grid, 20T); None without an answer."""
        if self.best is None:
            return None
        above = [p for p in self.points if p.params > self.best.params]
        if not above:
            return "grid"
        nxt = min(above, key=lambda p: p.params)
        if nxt.status != "INFEASIBLE":
            return "budget"
        # compute-optimal GPU-days grow as params^2 (Chinchilla's tokens and the FLOPs per token both ~ params): an
        # answer within the grid's step of the budget would be over it at the next size even if that size fitted
        at_next = (self.best.gpu_days or 0.0) * (nxt.params / self.best.params) ** 2
        return "memory" if at_next <= self.budget_gpu_days else "budget"

    def as_dict(self) -> dict:
        best = asdict(self.best) if self.best else None
        if self.best:
            tokens = CHINCHILLA_TOKENS_PER_PARAM * self.best.params
            cost = train_cost(tokens, self.best.tokens_per_s, self.gpus, self.price_per_gpu_hour_usd)
            best.update({"tokens": tokens, "train_days": cost.days, "gpu_hours": cost.gpu_hours,
                         "cost_usd": cost.dollars})
        return {"cluster": self.cluster, "gpus": self.gpus, "budget_gpu_days": self.budget_gpu_days,
                "best": best, "points": [asdict(p) for p in sorted(self.points, key=lambda p: p.params)],
                "limited_by": self.limited_by, "solves": len(self.points), "wall_s": self.wall_s}


def size_grid(family: str, vocab_size: int, rule: ShapeRule, seq_length: int,
              lo_params: float = 1e8, hi_params: float = 2e13, step: float = 1.03) -> list:
    """Distinct shapes on a log grid of parameter counts (3% apart), smallest first."""
    out, seen = [], set()
    n = lo_params
    while n <= hi_params:
        m = shape_for_params(n, family, vocab_size, rule, seq_length=seq_length)
        if (m.num_layers, m.hidden_size) not in seen:
            seen.add((m.num_layers, m.hidden_size))
            out.append(m)
        n *= step
    out.sort(key=lambda m: m.num_params())
    return out


def optimal_size(cluster, gpus: int, budget_gpu_days: float, training: TrainingSpec,
                 search: SearchSpec | None = None, solver: SolverSpec | None = None, family: str = "gpt",
                 vocab_size: int = 50257, rule: ShapeRule | None = None, time_limit_s: float | None = None,
                 price_per_gpu_hour_usd: float | None = None, probe_above: int = 2, progress=None) -> SizingResult:
    """Largest Chinchilla-optimal model trainable on `cluster` (already `gpus` GPUs) within the budget."""
    from planner.search.solve import solve

    if budget_gpu_days <= 0:
        raise SpecError(None, "--budget-gpu-days", "must be positive")
    t0 = time.perf_counter()
    rule = rule or ShapeRule()
    search = search or SearchSpec(schedules=("1f1b", "interleaved"))
    solver = solver or SolverSpec(time_limit_s=5.0)
    grid = size_grid(family, vocab_size, rule, training.seq_length)
    cache: dict[int, SizingPoint] = {}
    points: list[SizingPoint] = []

    def ok(i: int) -> bool:
        if i in cache:
            return cache[i].within_budget
        m = grid[i]
        spec = Spec(name=f"size-{m.name}", model=m, cluster=cluster, training=training, search=search, solver=solver,
                    source=None, raw={"model": m.__dict__, "cluster": cluster.name})
        p = SizingPoint(m.num_params(), m.name, m.num_layers, m.hidden_size, "INFEASIBLE")
        try:
            sol = solve(spec, time_limit_s=time_limit_s, simulate=False)
        except InfeasibleError:
            pass
        else:
            e = sol.estimate
            p.status, p.tokens_per_s, p.mfu, p.config = sol.solver.status, e.tokens_per_s, e.mfu, sol.config.label()
            p.gpu_days = chinchilla_gpu_days(p.params, e.tokens_per_s, gpus)
            p.within_budget = p.gpu_days <= budget_gpu_days
        cache[i] = p
        points.append(p)
        if progress:
            progress(p)
        return p.within_budget

    # first guess from peak FLOPs at 40% MFU: GPU-days = 6 N * 20 N / (0.4 * peak) / 86400
    peak = cluster.gpu.peak_flops(training.precision)
    guess = math.sqrt(budget_gpu_days * SECONDS_PER_DAY * 0.4 * peak / (6.0 * CHINCHILLA_TOKENS_PER_PARAM))
    i = min(range(len(grid)), key=lambda k: abs(math.log(grid[k].num_params() / guess)))
    # bracket: lo within budget, hi not (or the ends of the grid)
    step = 4
    if ok(i):
        lo, hi = i, None
        while hi is None:
            j = min(len(grid) - 1, lo + step)
            if j == lo:
                break
            if ok(j):
                lo = j
                step *= 2
            else:
                hi = j
    else:
        hi, lo = i, None
        while lo is None:
            j = max(0, hi - step)
            if j == hi:
                break
            if ok(j):
                lo = j
            else:
                hi = j
                step *= 2
    if lo is None:
        return SizingResult(cluster.name, gpus, budget_gpu_days, None, points, time.perf_counter() - t0,
                            price_per_gpu_hour_usd)
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid
    # throughput is not exactly monotone in size: look a little above the bisection's answer
    k = lo + 1
    while k < len(grid) and k <= lo + probe_above:
        if ok(k):
            lo = k
        k += 1
    return SizingResult(cluster.name, gpus, budget_gpu_days, cache[lo], points, time.perf_counter() - t0,
                        price_per_gpu_hour_usd)


def optimal_from_rows(rows: list[dict], budget_gpu_days: float) -> list[dict]:
    """Within a solved sweep: per cluster / GPU count / batch / sequence length, the largest model whose
    Chinchilla-optimal GPU-days at its achieved throughput fit the budget (a grid-resolution answer)."""
    best: dict = {}
    for r in rows:
        if r.get("status") not in ("OPTIMAL", "FEASIBLE", "TIME_LIMIT") or not _num(r.get("tokens_per_s")):
            continue
        gd = chinchilla_gpu_days(float(r["params"]), float(r["tokens_per_s"]), int(r["gpus"]))
        if gd > budget_gpu_days:
            continue
        key = (r["cluster"], int(r["gpus"]), r["global_batch_size"], r["seq_length"])
        if key not in best or float(r["params"]) > float(best[key]["params"]):
            best[key] = {"cluster": key[0], "gpus": key[1], "global_batch_size": key[2], "seq_length": key[3],
                         "budget_gpu_days": budget_gpu_days, "model": r["model"], "params": int(float(r["params"])),
                         "tokens_per_s": float(r["tokens_per_s"]), "gpu_days": gd, "case_id": r["case_id"]}
    return [best[k] for k in sorted(best, key=str)]
