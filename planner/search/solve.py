"""Orchestration: space -> memory feasibility -> bounds -> mapping (anneal, then CP-SAT) -> best plan.

Branch and bound across configurations: a configuration's compute time (bubbles included) is a
valid lower bound for every mapping of it, and MappingProblem.lower_bound() a tighter one per
layout, so whole candidates are pruned without solving their mapping. The survivors are mapped
by annealing (fast incumbent); then CP-SAT proves or tightens the most promising ones within the
time limit. The reported bound is the smallest bound over every candidate not proven worse.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planner.config import ParallelConfig
from planner.costs import Costs, default_costs
from planner.costs.memory import GiB
from planner.errors import InfeasibleError, SpecError
from planner.costs.iteration import (build_problem, compute_const, default_layout, evaluate, memory_limit_GiB,
                             stage_memory)
from planner.mapping.anneal import anneal
from planner.mapping.cpsat import solve_exact
from planner.mapping.problem import layouts
from planner.mapping.result import MappingResult
from planner.solution import Solution, SolverRecord, mapping_to_assign
from planner.search.space import enumerate_configs

EXACT_MAX_NODES = 64          # auto: CP-SAT proves mappings up to this many nodes; beyond, it bounds
SCREEN_ITERS = 1500           # annealing iterations per candidate while screening


@dataclass
class _Cand:
    cfg: ParallelConfig
    layout: object
    probs: list
    result: MappingResult
    proved: bool = False


def scenarios(spec, robust: str | None) -> list[np.ndarray]:
    cl = spec.cluster
    if robust and robust != "none":
        if not cl.snapshots:
            raise SpecError(cl.source, "network.bandwidth_snapshots",
                            f"robust planning ({robust}) needs measured snapshots in the cluster spec")
        return list(cl.snapshots)
    return [cl.bandwidth]


def feasible_configs(spec, costs: Costs, num_gpus: int | None = None):
    """(fitting configs with their compute bound, count enumerated, the closest miss)."""
    limit = memory_limit_GiB(spec)
    fits, total, closest = [], 0, None
    for cfg in enumerate_configs(spec, num_gpus):
        total += 1
        mem = stage_memory(spec, cfg, costs)
        peak = max(m.total for m in mem) / GiB
        if peak > limit:
            if closest is None or peak < closest[0]:
                closest = (peak, cfg, mem)
            continue
        fits.append((compute_const(spec, cfg, costs), cfg))
    fits.sort(key=lambda t: (t[0], t[1]))
    return fits, total, closest


def _infeasible_message(spec, total, closest) -> str:
    limit = memory_limit_GiB(spec)
    if total == 0:
        cl, m = spec.cluster, spec.model
        return (f"no valid parallel configuration: {cl.num_gpus} GPUs ({cl.nodes} x {cl.gpus_per_node}), "
                f"{m.num_layers} layers, {m.num_attention_heads} heads, global batch "
                f"{spec.training.global_batch_size}: no (tp, pp, dp, micro-batch) satisfies the divisibility rules "
                "(tp | gpus_per_node and heads, pp | layers, dp * micro_batch | global batch, whole nodes)")
    peak, cfg, mem = closest
    worst = max(mem, key=lambda b: b.total)
    parts = worst.as_GiB()
    top = max((k for k in parts if k != "total"), key=lambda k: parts[k])
    return (f"memory: none of {total} configurations fits in {limit:.1f} GiB per GPU "
            f"({spec.cluster.gpu.memory_GiB:g} GiB less the {spec.search.memory_margin:.0%} margin). "
            f"The closest, {cfg.label()}, needs {peak:.1f} GiB, {peak - limit:.1f} GiB over "
            f"(largest term: {top} {parts[top]:.1f} GiB). Try more GPUs, full recompute, ZeRO, or a smaller batch.")


def solve(spec, method: str | None = None, time_limit_s: float | None = None, seed: int | None = None,
          costs: Costs | None = None, robust: str | None = None, progress=None,
          num_gpus: int | None = None, simulate: bool = True) -> Solution:
    t0 = time.perf_counter()
    method = method or spec.solver.method
    limit = float(time_limit_s if time_limit_s is not None else spec.solver.time_limit_s)
    seed = spec.solver.seed if seed is None else int(seed)
    costs = costs or default_costs(spec.cluster)
    robust = spec.solver.robust if robust is None else robust
    mats = scenarios(spec, robust)
    rob = robust if robust and robust != "none" else "worst"
    deadline = t0 + limit

    fits, total, closest = feasible_configs(spec, costs, num_gpus)
    if total == 0 and num_gpus is None:
        # no valid config on every GPU (e.g. 14 nodes after failures): use the most whole nodes that work,
        # the mapping then also chooses which nodes stay idle
        gpn = spec.cluster.gpus_per_node
        for k in range(spec.cluster.nodes - 1, 0, -1):
            fits, total, closest = feasible_configs(spec, costs, k * gpn)
            if total:
                num_gpus = k * gpn
                break
    if not fits:
        raise InfeasibleError(_infeasible_message(spec, total, closest))
    pruned_mem = total - len(fits)

    # screening: branch and bound over (config, layout) with annealed mappings as incumbents
    best: _Cand | None = None
    cands: list[_Cand] = []
    open_bounds: list[float] = []        # bounds of candidates never mapped (time ran out)
    pruned_bound = 0
    screened_all = True
    for k, (lb, cfg) in enumerate(fits):
        if best is not None and lb >= best.result.objective:
            pruned_bound += sum(len(layouts(c.tp, c.pp, c.dp, spec.cluster.gpus_per_node)) for _, c in fits[k:])
            break
        if time.perf_counter() > deadline - 0.1 * limit and best is not None:
            screened_all = False
            open_bounds.append(lb)       # the rest are sorted by lb, so this one bounds them all
            break
        for lay in layouts(cfg.tp, cfg.pp, cfg.dp, spec.cluster.gpus_per_node):
            probs = [build_problem(spec, cfg, lay, costs, bandwidth=m) for m in mats]
            plb = max(p.lower_bound() for p in probs)
            if best is not None and plb >= best.result.objective:
                pruned_bound += 1
                continue
            init = probs[0].rank_order()
            res = anneal(probs, seed=seed, iterations=SCREEN_ITERS, init=init, robust=rob,
                         time_limit_s=max(0.05, deadline - time.perf_counter()))
            c = _Cand(cfg, lay, probs, res)
            cands.append(c)
            if best is None or res.objective < best.result.objective:
                best = c
        if progress:
            progress(k + 1, len(fits))
    assert best is not None

    # improvement and proof, most promising first: the incumbent is optimised to a proof; every
    # other candidate only has to be shown unable to beat it (a CP-SAT cutoff, usually fast)
    cands.sort(key=lambda c: c.result.objective)
    run_exact = method in ("exact", "auto")
    proved = 0
    exact_calls = 0
    solved = len(cands)
    for c in cands:
        if c.result.bound >= best.result.objective or deadline - time.perf_counter() <= 0.05:
            continue
        n = c.probs[0].n
        if not run_exact or (method == "auto" and n > EXACT_MAX_NODES):
            res = anneal(c.probs, seed=seed, init=c.result.assign, robust=rob,
                         time_limit_s=deadline - time.perf_counter())
            if res.objective < c.result.objective:
                c.result = MappingResult(res.assign, res.objective, c.result.bound, res.status, res.wall_s,
                                         res.method)
        else:
            budget = max(0.05, deadline - time.perf_counter())
            is_best = c is best
            exact_calls += 1
            ex = solve_exact(c.probs, time_limit_s=budget, seed=seed, hint=c.result.assign, robust=rob,
                             cutoff=None if is_best else best.result.objective)
            if ex.status == "PRUNED":
                c.result = MappingResult(c.result.assign, c.result.objective, ex.bound, c.result.status,
                                         ex.wall_s, "exact")
                proved += 1
            elif ex.objective <= c.result.objective + 1e-12:
                c.result = ex
                proved += ex.status == "OPTIMAL"
            else:
                c.result = MappingResult(c.result.assign, c.result.objective, max(ex.bound, c.result.bound),
                                         c.result.status, ex.wall_s, "exact")
        if c.result.objective < best.result.objective:
            best = c

    bounds = [min(c.result.bound, c.result.objective) for c in cands] + open_bounds
    bound = min([best.result.objective] + bounds)
    # CP-SAT costs are integers of 0.1 us, so its bounds carry a few units of rounding slack; the
    # tolerance is absolute so that a small mapping gap is never hidden by a long iteration
    tol = 2e-5
    if not screened_all:
        status = "TIME_LIMIT"
    else:
        status = "OPTIMAL" if bound >= best.result.objective - tol else "FEASIBLE"
    wall = time.perf_counter() - t0
    p0 = best.probs[0]
    used_method = method if method != "auto" else ("exact" if exact_calls else "anneal")
    rec = SolverRecord(used_method, status, best.result.objective, bound, wall, total, pruned_mem, pruned_bound,
                       solved, proved, best.result.objective - p0.const, max(0.0, best.result.bound - p0.const),
                       robust=robust or "none")
    reranked = None
    if simulate:
        est_best = best
        best, reranked = _rerank_by_simulation(spec, cands, best, costs,
                                               mats if robust and robust != "none" else None, rob)
        p0 = best.probs[0]
        if best is not est_best:
            # the simulator overruled the closed form: the plan is no longer the model's proven optimum
            rec.note = (f"re-ranked by simulation: the estimate's optimum {est_best.cfg.label()} "
                        f"({est_best.result.objective:.4f} s) simulates slower or over memory")
            if rec.status == "OPTIMAL":
                rec.status = "FEASIBLE"
    est = evaluate(spec, best.cfg, p0, best.result.assign, costs)
    alts = []
    seen = {best.cfg}
    for c in sorted(cands, key=lambda c: c.result.objective):
        if c.cfg in seen:
            continue
        seen.add(c.cfg)
        alts.append({"config": c.cfg.as_dict(), "iteration_s": c.result.objective,
                     "slower_by": c.result.objective / best.result.objective - 1,
                     "peak_memory_GiB": max(m.total for m in stage_memory(spec, c.cfg, costs)) / GiB})
        if len(alts) >= spec.search.top_k:
            break
    # the record describes the plan returned (the re-ranked one, if the simulator overruled)
    rec.objective = best.result.objective
    rec.bound = min(rec.bound, rec.objective)
    rec.mapping_objective = best.result.objective - p0.const
    rec.mapping_bound = max(0.0, min(best.result.bound, best.result.objective) - p0.const)
    sol = Solution(spec, best.cfg, best.layout, best.result.assign, p0.nodes, est, rec, alts)
    if simulate:
        from planner.simulator import agreement
        sim = _sim(spec, best, costs)
        sol.simulated = {"iteration_s": sim.iteration_s, "bubble_fraction": sim.bubble_fraction,
                         "peak_memory_GiB": sim.peak_memory_max_GiB,
                         "peak_memory_per_gpu_GiB": [round(x, 3) for x in sim.peak_memory_GiB],
                         "estimate_vs_simulation": agreement(sim, est),
                         "fits": sim.peak_memory_max_GiB <= memory_limit_GiB(spec)}
        if reranked:
            sol.simulated["reranked"] = reranked
    return sol


RERANK_WITHIN = 0.03     # candidates this close to the best estimate are re-ranked by simulation
RERANK_MAX = 5


def _sim(spec, c: _Cand, costs: Costs):
    from planner.simulator import simulate as run_sim
    return run_sim(spec, c.cfg, costs=costs, layout=c.layout, assign=c.result.assign, nodes=c.probs[0].nodes)


def _rerank_by_simulation(spec, cands, best, costs, scenarios=None, robust="worst"):
    """The closed form misses some critical paths and V-shape memory; the simulator judges the close ones.

    Candidates within RERANK_WITHIN of the best estimate (distinct configs, at most RERANK_MAX) are
    simulated; the fastest whose simulated peak memory fits wins. Returns (winner, record or None).
    Robust planning (scenarios = the bandwidth snapshots): each candidate is simulated on every
    snapshot and judged by the worst (or mean) simulated time, as the closed-form search was; judging
    on the main matrix alone would undo the robust choice.
    """
    limit = memory_limit_GiB(spec)
    pool, seen = [], set()
    for c in sorted(cands, key=lambda c: c.result.objective):
        if c.result.objective > best.result.objective * (1 + RERANK_WITHIN) or len(pool) >= RERANK_MAX:
            break
        if c.cfg in seen:
            continue
        seen.add(c.cfg)
        pool.append(c)
    rows = [(c, *_sim_pair(spec, c, costs, scenarios, robust)) for c in pool]
    fitting = [r for r in rows if r[2] <= limit]
    if not fitting:
        return best, None
    win = min(fitting, key=lambda r: (r[1], r[0].result.objective))[0]
    if len(rows) == 1 and win is best:
        return best, None
    record = [{"config": c.cfg.label(), "estimate_s": c.result.objective, "simulated_s": t,
               "simulated_peak_GiB": mem, "fits": mem <= limit} for c, t, mem in rows]
    return win, record


def _sim_pair(spec, c, costs, scenarios=None, robust="worst"):
    if not scenarios:
        sim = _sim(spec, c, costs)
        return sim.iteration_s, sim.peak_memory_max_GiB
    import dataclasses
    sims = [_sim(dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, bandwidth=m)), c, costs)
            for m in scenarios]
    t = [x.iteration_s for x in sims]
    return (float(np.mean(t)) if robust == "mean" else max(t)), max(x.peak_memory_max_GiB for x in sims)


def estimate_plan(spec, cfg: ParallelConfig, mapping=None, costs: Costs | None = None, file: str | None = None):
    """Estimate one given plan (no search). mapping: None (Megatron rank order) or a worker list."""
    costs = costs or default_costs(spec.cluster)
    check_config(spec, cfg)
    if mapping is None:
        lay = default_layout(cfg, spec.cluster.gpus_per_node)
        prob = build_problem(spec, cfg, lay, costs)
        assign = prob.rank_order()
    else:
        lay, grid = mapping_to_assign(mapping, cfg, spec.cluster.gpus_per_node, spec.cluster.nodes, file)
        prob = build_problem(spec, cfg, lay, costs)
        assign = grid
    return evaluate(spec, cfg, prob, assign, costs), lay, assign, prob


def check_config(spec, cfg: ParallelConfig) -> None:
    """Reject configs that do not fit the cluster or the model, naming the flag."""
    cl, m = spec.cluster, spec.model
    if cfg.num_gpus != cl.num_gpus:
        raise SpecError(None, "--tp/--pp/--dp", f"tp*pp*dp = {cfg.num_gpus} but the cluster has {cl.num_gpus} GPUs")
    if cl.gpus_per_node % cfg.tp:
        raise SpecError(None, "--tp", f"tp={cfg.tp} must divide gpus_per_node={cl.gpus_per_node}")
    if m.num_attention_heads % cfg.tp or m.num_kv_heads % cfg.tp:
        raise SpecError(None, "--tp", f"tp={cfg.tp} must divide the {m.num_attention_heads} heads "
                                      f"and {m.num_kv_heads} kv heads")
    if m.num_layers % (cfg.pp * max(1, cfg.vpp)):
        raise SpecError(None, "--pp", f"pp*vpp={cfg.pp * cfg.vpp} must divide {m.num_layers} layers")
    if cfg.global_batch_size != spec.training.global_batch_size:
        raise SpecError(None, "--mbs", f"dp*mbs*microbatches={cfg.global_batch_size} != global batch "
                                       f"{spec.training.global_batch_size}")
    if not layouts(cfg.tp, cfg.pp, cfg.dp, cl.gpus_per_node):
        raise SpecError(None, "--tp/--pp/--dp", "the config does not tile whole nodes")
