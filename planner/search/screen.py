"""Screening: the configurations that fit in memory, then branch and bound over (config, layout).

A configuration's compute time (bubbles included) is a valid lower bound for every mapping of it, and
MappingProblem.lower_bound() a tighter one per layout, so whole candidates are pruned without solving
their mapping; the survivors are mapped by annealing (a fast incumbent for the proof step).
Screening is limited by work (mapping/work.py: each anneal charges its iterations), not by the clock, so the
candidates it keeps do not depend on the machine's load; the wall clock is a safety stop (Screening.wall_stop).
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field, replace

import numpy as np

from planner import interrupt
from planner.config import ParallelConfig
from planner.costs import Costs
from planner.costs.context_parallel import stage_memories
from planner.costs.iteration import bound_differs, build_problems, compute_const, memory_limit_GiB
from planner.costs.memory import GiB
from planner.errors import InfeasibleError, SpecError
from planner.mapping import work
from planner.mapping.anneal import anneal
from planner.mapping.problem import layouts, robust_lower_bound
from planner.mapping.result import MappingResult
from planner.mapping.startpoint import initial as initial_placement
from planner.mapping.units import has_pace
from planner.search.space import block_top, enumerate_configs

# annealing iterations per candidate while screening: the work of the 1,500 the numpy annealer ran here before the
# incremental one (work.ANNEAL_ITERS_PER_S 31,000 -> 171,000: 1,500 x 5.5); 1,500 swap-only iterations left the
# 128-node spec's screening anneals far from converged (docs/notes/solver.md, "Incremental annealer")
SCREEN_ITERS = 8000
SCREEN_SHARE = 0.9            # screening stops, once it has an incumbent, when it has spent this share of the work
# candidates this close to the best estimate (distinct configs, at most RERANK_MAX) are re-ranked by simulation
# (rerank.py); screening maps those too (screen)
RERANK_WITHIN = 0.03
RERANK_MAX = 5
SCREEN_KEEP = 8               # bounded layouts whose problems screening holds for their anneal (the rest: rebuilt)
# the work a configuration's layout may take to build its problems (every snapshot), as a share of the budget; past
# it its walked hops are given up for the typical hop's traversals (iteration.build_problems). The shipped specs'
# dearest build takes 0.91 work s (llama3-405b-h100-fsdp-512, pp 32 on 32 rows), under this share of a 10 s limit's
# 3.5; a pp 32 interleaved order on 0.3 GB/s links took 13 (docs/notes/solver.md, "Deep pipelines on slow links")
WALK_SHARE = 0.5


@dataclass
class Candidate:
    """One (config, layout) with its problems (one per bandwidth scenario) and its best mapping so far."""
    cfg: ParallelConfig
    layout: object
    probs: list
    result: MappingResult
    proved: bool = False
    # (spec, its plan's simulation on that spec's own matrix), once made (rerank.simulate_candidate with keep: the
    # summary reads it instead of a second replay, 3 s at pp 64, m 1536)
    sim: object = field(default=None, compare=False, repr=False)


@dataclass
class Screening:
    best: Candidate
    cands: list[Candidate]
    open_bounds: list[float] = field(default_factory=list)   # bounds of candidates never mapped (time ran out)
    pruned_bound: int = 0
    screened_all: bool = True
    wall_stop: bool = False     # the wall-clock safety stop ended screening (the candidates then depend on the load)


def scenarios(spec, robust: str | None) -> list[np.ndarray]:
    cl = spec.cluster
    if robust and robust != "none":
        if not cl.snapshots:
            raise SpecError(cl.source, "network.bandwidth_snapshots",
                            f"robust planning ({robust}) needs measured snapshots in the cluster spec")
        return list(cl.snapshots)
    return [cl.bandwidth]


def feasible_configs(spec, costs: Costs, num_gpus: int | None = None, keep=None, dropped: dict | None = None,
                     tally: dict | None = None):
    """(fitting configs with their compute bound, count enumerated, the closest miss); with `keep` (a predicate on
    ParallelConfig), of the configs it keeps only; `dropped` collects what the frameworks' rules drop
    (space.enumerate_configs); `tally` adds up what was computed (configs, stages, fits: work.enumeration_work)."""
    limit = memory_limit_GiB(spec)
    fits, total, closest = [], 0, None
    stages = 0
    for cfg in enumerate_configs(spec, num_gpus, dropped):
        if keep is not None and not keep(cfg):
            continue
        total += 1
        if cfg.recompute == "block":
            seen = [0]
            cfg = block_layers(spec, cfg, costs, limit, seen)
            stages += seen[0]
            if cfg is None:
                continue
        mem, hopeless = [], False
        for m in stage_memories(spec, cfg, costs):
            mem.append(m)
            stages += 1
            if closest is not None and m.total / GiB > limit and m.total / GiB >= closest[0]:
                hopeless = True    # over the limit, and no closer than the closest miss: the other stages change
                break              # neither answer (tryout 7, F8: most configs of a 128-GPU space are over)
        if hopeless:
            continue
        peak = max(m.total for m in mem) / GiB
        if peak > limit:
            if closest is None or peak < closest[0]:
                closest = (peak, cfg, mem)
            continue
        fits.append((compute_const(spec, cfg, costs), cfg))
    fits.sort(key=lambda t: (t[0], t[1]))
    if tally is not None:
        for k, v in (("configs", total), ("stages", stages), ("fits", len(fits))):
            tally[k] = tally.get(k, 0) + v
    return fits, total, closest


def block_layers(spec, cfg: ParallelConfig, costs: Costs, limit: float | None = None,
                 seen: list | None = None) -> ParallelConfig | None:
    """Block recompute's N for a configuration enumerated without it: the fewest layers per model chunk, 1 .. the
    largest chunk's - 1, whose stages all fit in `limit` GiB (default the spec's). Memory falls and time grows with
    N (compute.recomputed_layers), so it is a bisection, and the fewest is the fastest that fits. When even the
    largest N does not fit, that N (the closest block comes; the caller finds it over the limit); None where no
    recompute at all fits and search.recompute has `none` (block would only add time), or where a chunk size leaves
    no N between none and full. `seen` (a one-item list) counts the stage memories computed (work accounting).
    A ZeRO-3 plan's block (torchtitan's every n-th block, ParallelConfig.layer_sac): the largest n that fits
    (layer_sac_frequency)."""
    limit = memory_limit_GiB(spec) if limit is None else limit
    top = block_top(cfg, spec.model.num_layers)
    if top < 1:
        return None

    def fits(n: int) -> bool:
        c = replace(cfg, recompute_layers=n) if n else replace(cfg, recompute="none", recompute_layers=None)
        for m in stage_memories(spec, c, costs):
            if seen is not None:
                seen[0] += 1
            if m.total / GiB > limit:
                return False
        return True

    if cfg.layer_sac:
        return layer_sac_frequency(spec, cfg, top, fits)
    if not fits(top):
        return replace(cfg, recompute_layers=top)
    if "none" in spec.search.recompute and fits(0):
        return None
    lo, hi = 1, top                  # hi always fits
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return replace(cfg, recompute_layers=hi)


def layer_sac_frequency(spec, cfg: ParallelConfig, top: int, fits) -> ParallelConfig | None:
    """torchtitan's layer SAC frequency n (a ZeRO-3 plan's block) for block_layers: the largest n in 2 .. `top` (the
    largest rank's layers; n = 1 is full recompute) whose stages all fit (`fits`). A rank recomputes
    floor(layers / n) blocks, so time falls as n grows and the largest n that fits is the fastest; memory is not
    monotone in n (with several chunks per rank the counter's multiples move between chunks of different held
    forwards, and the backward working set depends on where the last checkpointed block of a chunk sits), so n is
    scanned from `top` down, not bisected: one step per n (the n of one set of per-chunk counts differ only in the
    working set). As block_layers: n = 2 (the most recompute short of full) when nothing fits, None when the plan
    fits without recompute and search.recompute has `none`."""
    if not fits(2):
        return replace(cfg, recompute_layers=2)
    if "none" in spec.search.recompute and fits(0):
        return None
    for n in range(top, 2, -1):
        if fits(n):
            return replace(cfg, recompute_layers=n)
    return replace(cfg, recompute_layers=2)


def fitting_configs(spec, costs: Costs, num_gpus: int | None = None, tally: dict | None = None):
    """(fits, configs enumerated) as feasible_configs; raises InfeasibleError naming the closest miss. `tally`: as
    feasible_configs', over every pass.

    With no valid config on every GPU (e.g. 14 nodes after failures) and no num_gpus given, the most
    whole nodes that have one are used: the mapping then also chooses which nodes stay idle."""
    dropped: dict = {}
    fits, total, closest = feasible_configs(spec, costs, num_gpus, dropped=dropped, tally=tally)
    if total == 0 and num_gpus is None:
        gpn = spec.cluster.gpus_per_node
        for k in range(spec.cluster.nodes - 1, 0, -1):
            fits, total, closest = feasible_configs(spec, costs, k * gpn, tally=tally)
            if total:
                break
    if not fits:
        raise InfeasibleError(_infeasible_message(spec, total, closest, dropped, num_gpus))
    return fits, total


def _infeasible_message(spec, total, closest, dropped=None, num_gpus: int | None = None) -> str:
    limit = memory_limit_GiB(spec)
    if total == 0 and dropped:
        return dropped_message(spec, dropped, num_gpus)
    if total == 0:
        from planner.search.diagnose import why_no_config
        return why_no_config(spec)
    return (f"memory: none of {total} configurations fits in {limit:.1f} GiB per GPU "
            f"({spec.cluster.gpu.memory_GiB:g} GiB less the {spec.search.memory_margin:.0%} margin). "
            f"The closest, {closest_miss(closest, limit)}. "
            f"Try {memory_advice(spec, closest[1], largest_term(closest[2])[0])}.")


# what the frameworks' rules that drop configurations ask of the spec (space.enumerate_configs' `dropped`), by field
DROPPED_FIX = {
    "search.zero": "add 0, 1 or 2 to search.zero (ZeRO-3 needs dp x cp > 1)",
    "search.dp_shard": "add 0 (FSDP over all dp) to search.dp_shard, or a shard size that divides dp",
    "search.sequence_parallel": "a tp that divides seq_length / cp, or false in search.sequence_parallel",
    "search.recompute": "add full (or none / selective) to search.recompute; for block, fewer pipeline stages / "
                        "virtual stages",
    "training.precision": "a seq_length / micro-batch size whose tokens per GEMM are a multiple of 16, a model whose "
                          "widths are, or precision bf16",
}


def dropped_message(spec, dropped: dict, num_gpus: int | None = None) -> str:
    """Why a spec whose divisibility rules leave configurations has none to search: the frameworks' rules that
    dropped them (space.enumerate_configs' `dropped`), each with its spec field, the first case and the fix."""
    G = num_gpus or spec.cluster.num_gpus
    lines = [f"no configuration to search for {G} GPUs: the divisibility rules leave some, but every one breaks a "
             "framework rule:"]
    for key, (n, why) in dropped.items():
        lines.append(f"  {key} ({n} configuration(s) dropped), e.g. {why}. Fix: {DROPPED_FIX.get(key, key)}")
    return "\n".join(lines)


def memory_advice(spec, cfg, top: str) -> str:
    """What could still lower the closest miss's largest memory term: only knobs it does not already use. Model state
    (weights, gradients, optimizer) shrinks with more GPUs to shard it over or ZeRO; activations and logits with
    recompute, context parallelism (when the search had no legal cp > 1), a smaller micro-batch or a shorter
    sequence."""
    tips = ["more GPUs"]
    if cfg.dp * cfg.cp > 1 and cfg.zero < 3:
        tips.append("ZeRO" + ("" if 3 in spec.search.zero else " (search.zero: [.., 3])"))
    if top in ("activations", "logits", "transient", "correction"):
        if cfg.recompute != "full":
            tips.append("full recompute" + ("" if "full" in spec.search.recompute else " (search.recompute)"))
        cp = context_parallel_tip(spec, cfg)
        if cp:
            tips.append(cp)
        tips.append("a smaller micro-batch" if cfg.micro_batch_size > 1 else "a shorter sequence")
    return tips[0] if len(tips) == 1 else ", ".join(tips[:-1]) + " or " + tips[-1]


def context_parallel_tip(spec, cfg) -> str:
    """Context parallelism as memory advice (activations and logits shrink by cp), when the search had no legal
    cp > 1 to offer: the degrees auto would search, or why the spec's list searched none ('' when cp > 1 was
    searched)."""
    from planner.costs.context_parallel import auto_context_parallel, cp_alone_legal, dropped_degrees
    from planner.search.space import context_parallel_options
    G, tr, gpn = cfg.num_gpus, spec.training, spec.cluster.gpus_per_node
    if cfg.cp > 1 or any(1 < c <= G and cp_alone_legal(tr.seq_length, gpn, c)
                         for c in context_parallel_options(spec, G)):
        return ""
    legal = auto_context_parallel(tr.seq_length, gpn, G)
    listed = [c for c in (spec.search.context_parallel or ()) if c > 1]
    if not legal:
        return (f"context parallelism (search.context_parallel; seq_length {tr.seq_length} must be a multiple of "
                "2 * cp)")
    why = f"; {dropped_degrees(tr.seq_length, gpn, listed)}" if listed else ""
    return (f"context parallelism (search.context_parallel: auto = [1, {', '.join(map(str, legal))}]{why})")


def closest_miss(closest, limit: float) -> str:
    """'<label>, needs X GiB, Y GiB over (largest term: ...)' of feasible_configs' closest miss."""
    peak, cfg, mem = closest
    top, gib = largest_term(mem)
    return (f"{cfg.label()}, needs {peak:.1f} GiB, {peak - limit:.1f} GiB over "
            f"(largest term: {top} {gib:.1f} GiB)")


def largest_term(mem) -> tuple[str, float]:
    """(name, GiB) of the largest memory term of the fullest stage."""
    parts = max(mem, key=lambda b: b.total).as_GiB()
    top = max((k for k in parts if k != "total"), key=lambda k: parts[k])
    return top, parts[top]


def layout_bound(probs, robust: str, full: bool) -> float:
    """The bound screening queues a layout at, from its problems `probs` (full: the problems it is mapped on; else
    build_problem's bound_only relaxation). A relaxation of walked hops bounds the typical hop's model too:
    the full build may fall back to it (build_problems), whose optimum can lie under the walked relaxation (on
    0.1 GB/s links, 2.501 s against 2.513: tests/test_walk_allowance.py)."""
    plb = robust_lower_bound(probs, robust)
    if not full and probs[0].typical is not None:
        plb = min(plb, robust_lower_bound([p.typical for p in probs], robust))
    return plb


def screen(spec, fits, mats, costs: Costs, *, seed: int, robust: str, budget: float, spent, deadline: float,
           progress=None, own_from: float | None = None, bounds: dict | None = None) -> Screening:
    """Best-first branch and bound over (config, layout), with annealed mappings as incumbents.

    Every config enters at its compute bound (fits' order); the lowest entry is taken next. A config taken for
    the first time has its layouts' problems built and bounded (MappingProblem.lower_bound(), which sees the
    network: pipeline hops, the DP ring) and each layout goes back in at that bound; a (config, layout) taken
    at its own bound is annealed. So the layouts are mapped in the order of the network-aware bound, not of the
    compute bound alone (tryout 7, F1: on a slow inter-node link tp8 pp1 dp8 has the lowest compute bound and the
    slowest DP ring), and no layout whose bound is worse than a better one's is mapped first. Stops when the
    lowest entry cannot beat the incumbent (everything left is pruned; while fewer than RERANK_MAX configs lie
    within RERANK_WITHIN of it, entries in that window are still mapped: the simulator re-ranks those), or, with
    an incumbent, when SCREEN_SHARE
    of the work budget (work seconds; `spent` the open work meter) is spent, or at the wall-clock safety stop
    `deadline`. Without an incumbent, bounding goes on to the first anneal (a plan is needed) until screening's
    own work (`spent` past `own_from`: the meter's reading after the memory screen, shared by the passes of a
    re-search; default: at the start of this call) reaches SCREEN_SHARE of the budget, whatever the memory screen
    spent (that alone may exceed a short limit: tryout 7, 7,506 configurations against 2.8 work s at 8 s); then,
    or at the safety stop, the best layout bounded so far is annealed. `bounds` (config -> [(bound, layout index,
    layout, full)]) keeps the layouts' bounds across calls: a re-search after a simulation veto starts from them. A
    layout is bounded first on build_problem's bound_only relaxation (interleaved's steep pace left out: a few walks a
    boundary instead of its curves'), and again on its full problem (`full`) when that bound comes first: the problem
    its anneal needs anyway, so configurations that are pruned never pay for their curves. Each layout's builds
    (every snapshot) may take WALK_SHARE of the budget; past it, its walked hops fall back to the typical hop's
    model (iteration.build_problems), and a relaxation's bound holds under both (layout_bound)."""
    best: Candidate | None = None
    cands: list[Candidate] = []
    open_bounds: list[float] = []
    pruned_bound = 0
    screened_all = True
    wall_stop = False
    gpn = spec.cluster.gpus_per_node

    def lays_of(cfg):
        return layouts(cfg.tp * cfg.cp, cfg.pp, cfg.dp, gpn, cfg.dp_shard)

    # entries (bound, config index, layout index or -1: not bounded yet, layout, whether the bound is the full
    # problem's: False for the bound_only relaxation's)
    bounds = {} if bounds is None else bounds
    heap = []
    for k, (lb, cfg) in enumerate(fits):
        heap.extend([(plb, k, j, lay, full) for plb, j, lay, full in bounds[cfg]] if cfg in bounds
                    else [(lb, k, -1, None, True)])
    heapq.heapify(heap)
    kept: dict = {}           # (k, j) -> problems of the last few bounded layouts, so most anneals need no rebuild
    bounded = 0
    start = spent.used_s if own_from is None else own_from      # where screening's own work starts

    def problems(k, lay, bound_only: bool = False):
        probs = build_problems(spec, fits[k][1], lay, costs, mats, bound_only=bound_only,
                               walk_work_s=WALK_SHARE * budget)
        work.charge(len(probs) * (work.SCREEN_PROBLEM_WORK_S + work.SCREEN_NODE2_WORK_S * probs[0].n ** 2))
        return probs

    def cut() -> float:
        """Entries from here on are pruned: the incumbent's objective, or, while fewer than RERANK_MAX configs lie
        within RERANK_WITHIN of it, that window: the simulator re-ranks those close candidates (rerank.py), so
        they are mapped too (on the work left), as the compute-bound order mapped them before."""
        t = best.result.objective
        close = {c.cfg for c in cands if c.result.objective <= t * (1 + RERANK_WITHIN)}
        return t * (1 + RERANK_WITHIN) if len(close) < RERANK_MAX else t

    def bound(k, j, lay, probs, full) -> int:
        """Bound layout j of config k on `probs` (full: the full problems, kept for the anneal) and queue it at its
        bound (layout_bound); 1 where that bound prunes it."""
        plb = layout_bound(probs, robust, full)
        bounds[fits[k][1]][j] = (plb, j, lay, full)
        if best is not None and plb >= cut():
            return 1
        heapq.heappush(heap, (plb, k, j, lay, full))
        if full:
            kept[(k, j)] = probs
            if len(kept) > SCREEN_KEEP:
                del kept[next(iter(kept))]
        return 0

    while heap:
        key = heap[0][0]
        wall = time.perf_counter() > deadline
        stop = spent.used_s > SCREEN_SHARE * budget or wall or interrupt.requested()
        if best is not None and (key >= cut() or (stop and key >= best.result.objective)):
            # everything left is pruned by its bound (a close one left unmapped at the stop included)
            pruned_bound += sum(1 if j >= 0 else len(lays_of(fits[k][1])) for _, k, j, _, _ in heap)
            break
        if stop and best is not None:
            screened_all = False
            wall_stop = wall
            open_bounds.append(key)      # the lowest bound left bounds every entry left
            break
        if (wall or interrupt.requested() or spent.used_s - start > SCREEN_SHARE * budget) and \
                any(j >= 0 for _, _, j, _, _ in heap):
            # no incumbent yet, and screening's own work past SCREEN_SHARE of the budget (whatever the memory
            # screen spent before it), the safety stop or a Ctrl-C: the best bounded layout is annealed now
            wall_stop |= wall
            at = min(range(len(heap)), key=lambda i: (heap[i][2] < 0, heap[i]))
            entry = heap[at]
            heap[at] = heap[-1]
            heap.pop()
            heapq.heapify(heap)
        else:
            entry = heapq.heappop(heap)
        _, k, j, lay, full = entry
        cfg = fits[k][1]
        if j < 0:
            lays = lays_of(cfg)
            bounds[cfg] = [None] * len(lays)
            for j, lay in enumerate(lays):
                exact = not bound_differs(spec, cfg, lay)
                probs = problems(k, lay, bound_only=not exact)
                # a relaxation over the walks' allowance: the full build would fall back too, to these problems
                pruned_bound += bound(k, j, lay, probs, exact or probs[0].walk_dropped)
            bounded += 1
            if progress:
                progress(bounded, len(fits))
            continue
        if not full:       # first at its relaxation's bound: bounded again on the full problem, its anneal's
            pruned_bound += bound(k, j, lay, problems(k, lay), True)
            continue
        probs = kept.pop((k, j), None) or problems(k, lay)
        # the start's search (rows confined to groups of nodes) on at most the work of the screening anneal itself
        init = initial_placement(probs, robust, budget_s=work.anneal_work(SCREEN_ITERS, lay.rows, len(probs),
                                                                          has_pace(probs)))
        res = anneal(probs, seed=seed, iterations=SCREEN_ITERS, init=init, robust=robust,
                     time_limit_s=max(0.05, deadline - time.perf_counter()))
        wall_stop |= time.perf_counter() > deadline     # the safety stop may have cut this anneal short
        c = Candidate(cfg, lay, probs, res)
        cands.append(c)
        if best is None or res.objective < best.result.objective:
            best = c
    assert best is not None
    return Screening(best, cands, open_bounds, pruned_bound, screened_all, wall_stop)
