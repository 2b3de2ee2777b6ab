"""What a search reports: its solver record (bound, status, counts), and the Solution of the chosen plan
with its alternatives and, when simulated, the simulation's verdict."""
from __future__ import annotations

import heapq
import time

from planner.config import fork_note
from planner.costs import Costs
from planner.costs.iteration import build_problem, build_problems, evaluate, memory_limit_GiB, stage_memory
from planner.costs.memory import GiB
from planner.mapping import work
from planner.mapping.problem import layouts, robust_objective
from planner.search.prove import Proof
from planner.search.rerank import simulate_candidate
from planner.search.screen import Candidate, Screening, closest_miss, feasible_configs
from planner.solution import Solution, SolverRecord

# CP-SAT costs are integers of 0.1 us, so its bounds carry a few units of rounding slack; the tolerance
# is absolute so that a small mapping gap is never hidden by a long iteration
BOUND_TOL = 2e-5


def solver_record(screening: Screening, proof: Proof, *, method: str, robust: str | None, t0: float,
                  total: int, pruned_mem: int, solved: int, work_s: float = 0.0, wall_hit: bool = False
                  ) -> SolverRecord:
    """The record of the closed-form search: the smallest bound over every candidate not proven worse."""
    best, cands = proof.best, screening.cands
    bounds = [min(c.result.bound, c.result.objective) for c in cands] + screening.open_bounds
    bound = min([best.result.objective] + bounds)
    if not screening.screened_all:
        status = "TIME_LIMIT"
    else:
        status = "OPTIMAL" if bound >= best.result.objective - BOUND_TOL else "FEASIBLE"
    wall = time.perf_counter() - t0
    p0 = best.probs[0]
    used_method = method if method != "auto" else ("portfolio" if proof.exact_calls else "anneal")
    if screening.wall_stop or proof.wall_stop or wall_hit:
        stopped_by = "wall"
    else:
        stopped_by = "proof" if status == "OPTIMAL" else "work"
    return SolverRecord(used_method, status, best.result.objective, bound, wall, total, pruned_mem,
                        screening.pruned_bound, solved, proof.proved, best.result.objective - p0.const,
                        max(0.0, best.result.bound - p0.const), robust=robust or "none", stopped_by=stopped_by,
                        work_s=work_s)


def note_overruled(rec: SolverRecord, est_best: Candidate, best: Candidate) -> None:
    """When the simulator overruled the closed form, the plan is no longer the model's proven optimum."""
    if best is not est_best:
        rec.note = (f"re-ranked by simulation: the estimate's optimum {est_best.cfg.label()} "
                    f"({est_best.result.objective:.4f} s) simulates slower or over memory")
        if rec.status == "OPTIMAL":
            rec.status = "FEASIBLE"


def plan_shape(cfg) -> tuple:
    """What makes two plans structurally different to a practitioner: the tp, cp, pp and dp degrees and whether the
    data-parallel group shards the parameters (FSDP / ZeRO-3, and its HSDP shard group). Configs of one shape differ
    only in schedule / vpp, sequence parallelism, recompute, micro-batch size or ZeRO 0-2 (a flag of one framework;
    tryout 7, F5: five alternatives at v = 10, 8, 40, 5 of one config)."""
    return cfg.tp, cfg.cp, cfg.pp, cfg.dp, cfg.zero == 3, cfg.dp_shard


# at most this many pruned configs scored at rank order while looking for each shape's best (bounds the cost)
SHAPE_SCORES = 48
# and at most this share of the solve's work budget on their problem builds (each a walk of the plan's order where
# links are slow: 77 s of a 119 s profiled solve at --time-limit 10 on a slow-link 128-node interleaved stress spec,
# docs/notes/solver.md "The summary's alternatives, bounded by work"); checked before each build, so one may overrun
ALTERNATIVES_WORK_SHARE = 1.0


def alternatives(spec, cands: list[Candidate], best: Candidate, costs: Costs, fits=None, mats=None,
                 robust: str = "worst", work_s: float | None = None, walk_work_s: float | None = None) -> list[dict]:
    """Other configs than the plan (one layout each, at most search.top_k), relative to it. First any searched config
    the estimate rated faster than the plan (one the simulator overruled), then the best config of
    each plan_shape other than the plan's, fastest first; then, while fewer than top_k, the rest (near-duplicates of
    a shape already listed: another vpp, sp, recompute, micro-batch or ZeRO 0-2), fastest first. A config is a mapped
    candidate (`mapping: searched`, at its searched time) or a fitting config the search pruned by its bound, scored at
    Megatron's rank-order mapping over its layouts (`mapping: rank order`: an upper bound on what a search would give
    it; its bound already says it cannot beat the plan), as the search scored the candidates: over the bandwidth
    scenarios `mats` (robust worst / mean), or the cluster's matrix. A shape's best is found best-first (a pruned
    config is scored only while its bound is below the best time found for its shape, at most SHAPE_SCORES of them);
    the rest are the mapped candidates in time order, then the pruned configs in bound order. work_s: the work (work
    seconds) their builds may take, None: no limit; past it no further pruned config is scored (deterministic: work,
    not the clock). walk_work_s: each build's allowance for walked hops, as screening's (iteration.build_problems); a
    row scored on the typical hop's model past it says `walks_dropped: true`."""
    top_k = spec.search.top_k
    searched = {c.cfg: c.result.objective for c in cands}
    timed = {}
    spent = work.Meter()

    # configs scored on the typical hop's model (their walks over the allowance: build_problems), as `searched` reads
    # each config's candidates
    dropped = {cfg for cfg, d in {c.cfg: c.probs[0].walk_dropped for c in cands}.items() if d}

    def rank_order_s(cfg):
        if cfg not in timed:
            lays = layouts(cfg.tp * cfg.cp, cfg.pp, cfg.dp, spec.cluster.gpus_per_node, cfg.dp_shard)
            with work.metered() as mt:
                scored = [(robust_objective(probs, probs[0].rank_order(), robust), probs[0].walk_dropped)
                          for probs in (build_problems(spec, cfg, lay, costs, mats, walk_work_s=walk_work_s)
                                        for lay in lays)]
            least = min(scored) if scored else None
            timed[cfg] = None if least is None else float(least[0])
            if least is not None and least[1]:
                dropped.add(cfg)
            spent.used_s += mt.used_s
        return timed[cfg]

    def over() -> bool:
        return work_s is not None and spent.used_s >= work_s

    def row(cfg):
        t = searched[cfg] if cfg in searched else timed[cfg]
        return {"config": cfg.as_dict(), "iteration_s": t, "slower_by": t / best.result.objective - 1,
                "peak_memory_GiB": max(m.total for m in stage_memory(spec, cfg, costs)) / GiB,
                "mapping": "searched" if cfg in searched else "rank order",
                **({"walks_dropped": True} if cfg in dropped else {})}

    # configs the estimate rated faster than the plan (the simulator overruled them: note_overruled) come first,
    # whatever their shape: they are the evidence for the re-ranking (a negative slower_by)
    faster = [cfg for cfg in sorted(searched, key=searched.get)
              if searched[cfg] < best.result.objective and cfg != best.cfg][:top_k]
    seen, shapes = {best.cfg, *faster}, {plan_shape(best.cfg), *map(plan_shape, faster)}
    # the best of each new shape: a heap of (time or bound, tie, cfg, exact); a bound is replaced by its time
    heap = [(t, k, cfg, True) for k, (cfg, t) in enumerate(sorted(searched.items(), key=lambda x: x[1]))]
    heap += [(lb, len(heap) + k, cfg, False) for k, (lb, cfg) in enumerate(fits or []) if cfg not in searched]
    heapq.heapify(heap)
    distinct, scored = [], 0
    while heap and len(faster) + len(distinct) < top_k:
        t, k, cfg, exact = heapq.heappop(heap)
        if cfg in seen or plan_shape(cfg) in shapes:
            continue
        if not exact:
            if scored >= SHAPE_SCORES or over():
                continue
            scored += 1
            t = rank_order_s(cfg)
            if t is not None:
                heapq.heappush(heap, (t, k, cfg, True))
            continue
        seen.add(cfg)
        shapes.add(plan_shape(cfg))
        distinct.append(cfg)
    rest = []
    for cfg in sorted(searched, key=searched.get):
        if len(faster) + len(distinct) + len(rest) >= top_k:
            break
        if cfg not in seen:
            seen.add(cfg)
            rest.append(cfg)
    for _, cfg in fits or []:
        if len(faster) + len(distinct) + len(rest) >= top_k:
            break
        if cfg not in seen and (cfg in timed or not over()) and rank_order_s(cfg) is not None:
            seen.add(cfg)
            rest.append(cfg)
    by_time = lambda a: a["iteration_s"]     # noqa: E731
    return [*map(row, faster)] + sorted(map(row, distinct), key=by_time) + sorted(map(row, rest), key=by_time)


# configs of the other family scored (at rank order) for a family comparison: bounds the note's cost
FSDP_COMPARE_CONFIGS = 32


def _family(cfg) -> str:
    return "FSDP (ZeRO-3)" if cfg.zero == 3 else "tp/pp with ZeRO 0-2"


def _peak(spec, cfg, costs: Costs) -> float:
    return max(m.total for m in stage_memory(spec, cfg, costs)) / GiB


def best_of_other_family(spec, best: Candidate, cands: list[Candidate], costs: Costs, other, name: str,
                         all_fits=None, why_none: str = "") -> str:
    """The best plan the search saw among configs with other(cfg) true, against the chosen one: its mapped candidates,
    and the fitting configs it pruned by their bounds (never mapped) at their rank-order mapping, since a mapped few
    alone can mislead (a pruned config may be close behind the chosen plan); when none fits, the closest miss.
    all_fits: the search's fitting configs with their bounds (screen.feasible_configs); without them, or when none of
    them is of the other family, one more pass over the configurations (which also finds the closest miss)."""
    t = best.result.objective
    fits = [(lb, c) for lb, c in all_fits if other(c)] if all_fits is not None else []
    if not fits:
        fits, total, closest = feasible_configs(spec, costs, best.cfg.num_gpus, keep=other)
    if not fits:
        if closest is None:
            return (f"no {name} plan in the search" + (f" ({why_none})" if why_none else "") if not total
                    else f"no {name} plan fits in memory")
        return f"no {name} plan fits in memory: the closest, {closest_miss(closest, memory_limit_GiB(spec))}"
    found = [(c.result.objective, c.cfg) for c in cands if other(c.cfg)]
    mapped = {cfg for _, cfg in found}
    cut = min((o for o, _ in found), default=float("inf"))
    for lb, cfg in fits[:FSDP_COMPARE_CONFIGS]:
        if lb >= cut:
            break
        if cfg in mapped:
            continue
        for lay in layouts(cfg.tp * cfg.cp, cfg.pp, cfg.dp, spec.cluster.gpus_per_node, cfg.dp_shard):
            prob = build_problem(spec, cfg, lay, costs)
            found.append((prob.objective(prob.rank_order()), cfg))
    if found:
        o, cfg = min(found, key=lambda x: (x[0], x[1]))
        return (f"best {name} plan found {cfg.label()}: {o:.4f} s ({o / t - 1:+.1%}), "
                f"{_peak(spec, cfg, costs):.1f} GiB")
    lb, cfg = fits[0]
    return (f"best {name} plan {cfg.label()}: its compute alone takes {lb:.4f} s ({lb / t - 1:+.1%}), "
            f"{_peak(spec, cfg, costs):.1f} GiB")


def fsdp_comparison(spec, best: Candidate, cands: list[Candidate], costs: Costs, fits=None) -> str:
    """With ZeRO-3 and other stages in the search: the best plan of the other family against the chosen one (the
    mapped candidates', or else the fitting config of the least compute bound, which the chosen plan beats)."""
    if 3 not in spec.search.zero or len(spec.search.zero) == 1:
        return ""
    mine = best.cfg.zero == 3
    head = f"{_family(best.cfg)} chosen ({best.result.objective:.4f} s, {_peak(spec, best.cfg, costs):.1f} GiB)"
    lower = [z for z in spec.search.zero if z < 3]
    if mine and lower:
        from dataclasses import replace
        same = replace(best.cfg, zero=max(lower), dp_shard=0)
        need = _peak(spec, same, costs)
        if need > memory_limit_GiB(spec):
            head += (f"; the same split with ZeRO-{max(lower)} needs {need:.1f} GiB, over the "
                     f"{memory_limit_GiB(spec):.1f} GiB usable")
    other = "tp/pp with ZeRO 0-2" if mine else "FSDP (ZeRO-3)"
    return f"{head}; " + best_of_other_family(spec, best, cands, costs, lambda c: (c.zero == 3) != mine, other, fits)


def cp_comparison(spec, best: Candidate, cands: list[Candidate], costs: Costs, fits=None) -> str:
    """With cp = 1 and cp > 1 in the search: the best plan on the other side of cp = 1 against the chosen one, or why
    none is (the closest miss of memory)."""
    from planner.costs.context_parallel import dropped_degrees
    from planner.search.space import context_parallel_options
    tr, gpn = spec.training, spec.cluster.gpus_per_node
    degrees = context_parallel_options(spec, best.cfg.num_gpus)
    if spec.search.context_parallel is None and degrees == (1,) and best.cfg.num_gpus > 1:
        return (f"search.context_parallel auto searched cp = 1 only: seq_length {tr.seq_length} is not a multiple of "
                "2 * cp for any cp > 1 (causal load balancing)")
    if 1 not in degrees or len(degrees) == 1:
        return ""
    mine = best.cfg.cp > 1
    head = f"cp = {best.cfg.cp} chosen ({best.result.objective:.4f} s, {_peak(spec, best.cfg, costs):.1f} GiB)"
    other = "cp = 1" if mine else "cp > 1"
    return f"{head}; " + best_of_other_family(spec, best, cands, costs, lambda c: (c.cp > 1) != mine, other, fits,
                                              why_none=dropped_degrees(tr.seq_length, gpn, degrees))


# the plan's peak within this fraction of the usable memory (limit_GiB) counts as tight (tryout 7, F6: 74.0 of 76.0)
TIGHT_MEMORY = 0.03
CP_HINT_SEQ = 8192        # from this sequence length on, context parallelism is the usual lever for activations


def context_parallel_hint(spec, cfg, costs: Costs) -> str:
    """A plan within TIGHT_MEMORY of the usable memory, from a spec that left search.context_parallel at its default
    [1] with seq_length >= CP_HINT_SEQ: say that `context_parallel: auto` would also search cp > 1, which splits each
    sequence's activations over cp GPUs (tryout 7, F6: NeMo's tp1 cp2 dp4 ran 0.08% slower with 7 GiB more headroom).
    Nothing where cp > 1 cannot run (unfused attention, the deepspeed engine, no legal degree)."""
    from planner.costs.context_parallel import auto_context_parallel
    tr, search = spec.training, spec.search
    named = "context_parallel" in ((spec.raw or {}).get("search") or {})
    if named or search.context_parallel != (1,) or tr.seq_length < CP_HINT_SEQ:
        return ""
    if tr.attention != "fused" or tr.pipeline_engine != "megatron":
        return ""
    if not auto_context_parallel(tr.seq_length, spec.cluster.gpus_per_node, cfg.num_gpus):
        return ""
    peak, limit = _peak(spec, cfg, costs), memory_limit_GiB(spec)
    if peak < (1 - TIGHT_MEMORY) * limit:
        return ""
    shown = round(limit, 3)     # as Estimate.memory_dict records it, so the note and the plan table print one figure
    return (f"the plan's {peak:.1f} GiB is within {1 - peak / limit:.1%} of the {shown:.1f} GiB usable and "
            f"search.context_parallel was left at [1]: `context_parallel: auto` also searches cp > 1, which splits "
            f"each sequence's {tr.seq_length} tokens (and their activations) over cp GPUs")


def idle_gpus_note(spec, cfg) -> str:
    """Where no configuration uses every GPU and the plan runs on whole nodes fewer (screen.fitting_configs): say how
    many stay idle and the nearest spec values that would use them all (diagnose.nearest_fixes)."""
    cl = spec.cluster
    if cfg.num_gpus >= cl.num_gpus:
        return ""
    from planner.search.diagnose import nearest_fixes
    # fewer nodes is the plan itself, not a way to use every GPU
    items = nearest_fixes(spec, cl.num_gpus, fewer_nodes=False)
    hint = f"; nearest values that would use them all: {'; '.join(items)}" if items else ""
    idle = (cl.num_gpus - cfg.num_gpus) // cl.gpus_per_node
    return (f"uses {cfg.num_gpus} of the cluster's {cl.num_gpus} GPUs, {idle} node(s) idle: no configuration in the "
            f"search space uses every GPU{hint}")


def fp8_param_gather_note(spec, cfg) -> str:
    """A ZeRO-3 plan (torchtitan's torchao Float8) chosen from a spec with training.fp8_param_gather: the key is
    Transformer Engine's (Megatron-Core's distributed optimizer) and the plan is costed without it."""
    if cfg.zero != 3 or not getattr(spec.training, "fp8_param_gather", False):
        return ""
    return ("training.fp8_param_gather does not apply to this ZeRO-3 plan (torchtitan, torchao Float8) and is not "
            "costed: its fp8 all-gather is training.fsdp_float8_all_gather" +
            ("" if getattr(spec.training, "fsdp_float8_all_gather", False) else ", off in this spec"))


def zero2_note(spec, cfg) -> str:
    """A ZeRO-2 plan no export runs: Megatron-LM has no ZeRO-2 (its distributed optimizer keeps the whole gradient
    buffer) and DeepSpeed's config takes ZeRO-2 only over plain data parallelism (export._deepspeed_limits)."""
    if cfg.zero != 2:
        return ""
    from planner.export import _deepspeed_limits
    why = _deepspeed_limits(cfg, spec.training.precision)
    if why is None:
        return ""
    return (f"ZeRO-2 plan that no `planner export` format runs: Megatron-LM has no ZeRO-2 (its distributed optimizer "
            f"keeps the whole gradient buffer) and DeepSpeed cannot run it ({why[0]} {why[1].split(':')[0]}); "
            "search.zero [1] or [3] gives plans that export")


def micro_batch_note(spec, num_gpus: int) -> str:
    """Where the default micro-batch sizes (powers of two) leave out sizes the batch divides into on the plan's
    num_gpus: the optimum and its proof are over the searched sizes only."""
    from planner.search.space import unsearched_micro_batches
    extra = unsearched_micro_batches(spec, num_gpus)
    if not extra:
        return ""
    shown = ", ".join(str(b) for b in extra[:8]) + (", ..." if len(extra) > 8 else "")
    return (f"micro-batch sizes searched: 1, 2, 4, 8, 16 (the default), and the bound covers only those; the batch "
            f"also divides into micro-batches of {shown}: name them in search.micro_batch_sizes to search them")


def walk_dropped_note(best: Candidate, walk_work_s: float | None) -> str:
    """What the plan's estimate lacks where its hops' walks were over the search's allowance (build_problems)."""
    if not best.probs[0].walk_dropped:
        return ""
    return (f"the plan's pipeline hops are charged at the typical hop, not walked per mapped boundary: the walks "
            f"would take more than the {walk_work_s:.2f} work s a configuration's problems may take at this time "
            "limit, and on slow links this estimate runs under the walked one (`planner estimate --mapping` walks "
            "them; so does a longer --time-limit)")


def summarise(spec, best: Candidate, cands: list[Candidate], rec: SolverRecord, costs: Costs, *,
              simulate: bool, reranked, fits=None, mats=None, robust: str = "worst",
              alternatives_work_s: float | None = None, walk_work_s: float | None = None) -> Solution:
    """The Solution of `best`; the record is updated to describe it (the re-ranked plan, if the simulator
    overruled). alternatives_work_s: the work the alternatives' rank-order scoring may take (alternatives);
    walk_work_s: each of their builds' allowance for walked hops (screening's)."""
    p0 = best.probs[0]
    # the plan's estimate on the cluster's own matrix (network.bandwidth), as `estimate --mapping` and `simulate` see
    # it; a robust search's problems are the bandwidth snapshots (screen.scenarios), whose worst / mean stays the
    # record's objective and the alternatives' scale (SolverRecord.robust_over says which is which)
    main = p0 if rec.robust == "none" else build_problem(spec, best.cfg, best.layout, costs, walk=not p0.walk_dropped)
    est = evaluate(spec, best.cfg, main, best.result.assign, costs)
    if rec.robust != "none":
        rec.snapshots = len(best.probs)
    alts = alternatives(spec, cands, best, costs, fits, mats, robust, alternatives_work_s, walk_work_s)
    rec.objective = best.result.objective
    rec.walks_dropped = p0.walk_dropped
    rec.bound = min(rec.bound, rec.objective)
    rec.mapping_objective = best.result.objective - p0.const
    rec.mapping_bound = max(0.0, min(best.result.bound, best.result.objective) - p0.const)
    for why in (fsdp_comparison(spec, best, cands, costs, fits), cp_comparison(spec, best, cands, costs, fits),
                context_parallel_hint(spec, best.cfg, costs), micro_batch_note(spec, best.cfg.num_gpus),
                idle_gpus_note(spec, best.cfg), fp8_param_gather_note(spec, best.cfg), zero2_note(spec, best.cfg),
                fork_note(best.cfg), walk_dropped_note(best, walk_work_s)):
        if why and why not in rec.note:
            rec.note = ((rec.note + "; ") if rec.note else "") + why
    sol = Solution(spec, best.cfg, best.layout, best.result.assign, p0.nodes, est, rec, alts)
    if simulate:
        from planner.simulator import agreement
        sim = simulate_candidate(spec, best, costs, keep=True)
        sol.simulated = {"iteration_s": sim.iteration_s, "bubble_fraction": sim.bubble_fraction,
                         "peak_memory_GiB": sim.peak_memory_max_GiB,
                         "peak_memory_per_gpu_GiB": [round(x, 3) for x in sim.peak_memory_GiB],
                         "estimate_vs_simulation": agreement(sim, est),
                         "fits": sim.peak_memory_max_GiB <= memory_limit_GiB(spec)}
        if reranked:
            sol.simulated["reranked"] = reranked
    return sol
