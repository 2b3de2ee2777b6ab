"""Orchestration: space -> memory feasibility -> bounds -> mapping (anneal, then CP-SAT) -> best plan.

The steps, each its own module: screen (configs that fit, branch and bound over (config, layout) with
annealed incumbents), prove (planner.mapping.solve, the portfolio, proves or tightens the most promising),
rerank (the simulator judges the close ones), summary (record, alternatives, Solution). The reported
bound is the smallest bound over every candidate not proven worse.

The time limit is turned into work (mapping/work.py: WORK_PER_S work seconds per second) that screening and
proof share and charge; the clock is only a safety stop at the limit, and the record says which ended the
search (stopped_by: proof, work or wall). Same spec and seed: same plan, on a busy or a quiet machine, unless
the safety stop fires.
"""
from __future__ import annotations

import time

from planner import interrupt
from planner.config import (
    V_SHAPES,
    ParallelConfig,
    engine_recompute_problem,
    fp8_shape_problem,
    interleaved_p2p_problem,
    sequence_parallel_problem,
    zero3_problem,
)
from planner.costs import Costs, default_costs
from planner.costs.iteration import build_problem, default_layout, evaluate
from planner.errors import SpecError
from planner.mapping import work
from planner.mapping.problem import layouts
from planner.search import screen as screen_mod
from planner.search.prove import prove
from planner.search.rerank import SimulationVeto, rerank_by_simulation
from planner.search.screen import SCREEN_SHARE, fitting_configs, scenarios, screen
from planner.search.summary import ALTERNATIVES_WORK_SHARE, note_overruled, solver_record, summarise
from planner.solution import Solution, mapping_to_assign

__all__ = ["check_config", "estimate_plan", "solve"]

WALL_SAFETY = 1.0     # the wall-clock safety stop of a search, in units of its time limit


def solve(spec, method: str | None = None, time_limit_s: float | None = None, seed: int | None = None,
          costs: Costs | None = None, robust: str | None = None, progress=None,
          num_gpus: int | None = None, simulate: bool = True) -> Solution:
    # one scope for the builds a process caches (work.charge_once): this solve pays each once, cache warm or not
    with work.once_scope():
        return _solve(spec, method, time_limit_s, seed, costs, robust, progress, num_gpus, simulate)


def _solve(spec, method, time_limit_s, seed, costs, robust, progress, num_gpus, simulate) -> Solution:
    t0 = time.perf_counter()
    method = method or spec.solver.method
    limit = float(time_limit_s if time_limit_s is not None else spec.solver.time_limit_s)
    seed = spec.solver.seed if seed is None else int(seed)
    costs = costs or default_costs(spec.cluster)
    robust = spec.solver.robust if robust is None else robust
    mats = scenarios(spec, robust)
    rob = robust if robust and robust != "none" else "worst"
    deadline = t0 + WALL_SAFETY * limit   # the safety stop; work decides (below)
    budget = work.WORK_PER_S * limit

    tally: dict = {}
    with work.metered() as order_work:     # what the screen's bounds charge themselves (the orders' runs and walks)
        fits, total = fitting_configs(spec, costs, num_gpus, tally=tally)
    vetoed: set = set()
    bounds: dict = {}     # each bounded config's layout bounds: a re-search starts from them (screen)
    # one meter and one budget over every pass: a re-search after a simulation veto gets what the earlier passes
    # left (screening still maps one candidate), and work_s is the whole solve's (review, Nov 26, finding 5)
    with work.metered(deadline=deadline) as spent:
        enum_work = work.enumeration_work(**tally) + order_work.used_s
        # the memory screen, once: a re-search reuses its configurations. The orders' runs were charged already to
        # any meter open around solve(); only this one missed them
        work.charge(enum_work - order_work.used_s)
        spent.used_s += order_work.used_s
        while True:
            kept = [f for f in fits if f[1] not in vetoed]
            screening = screen(spec, kept, mats, costs, seed=seed, robust=rob, budget=budget, spent=spent,
                               deadline=deadline, progress=progress, own_from=enum_work, bounds=bounds)
            solved = len(screening.cands)
            proof = prove(screening.cands, screening.best, method=method, seed=seed, robust=rob, budget=budget,
                          spent=spent, deadline=deadline)
            rec = solver_record(screening, proof, method=method, robust=robust, t0=t0, total=total,
                                pruned_mem=total - len(kept), solved=solved, work_s=spent.used_s,
                                wall_hit=spent.wall_hit)
            best, reranked = proof.best, None
            if not simulate:
                break
            try:
                best, reranked = rerank_by_simulation(spec, screening.cands, best, costs,
                                                      mats if robust and robust != "none" else None, rob)
            except SimulationVeto as veto:
                # a plan must fit by both judges: search again without what the simulator rejected
                vetoed |= veto.configs
                if len(vetoed) >= len(fits) or interrupt.requested():
                    raise
                continue
            break
    if simulate:
        note_overruled(rec, proof.best, best)
    notes = []
    if vetoed:
        notes.append(f"{len(vetoed)} configuration(s) the estimate fits were over memory in simulation and excluded")
    if enum_work >= SCREEN_SHARE * budget and rec.status != "OPTIMAL":
        notes.append(f"the memory screen of the {total} configurations took {enum_work:.2f} work s of the "
                     f"{budget:.2f} the time limit ({limit:g} s) buys: the search had little work left; a longer "
                     "--time-limit searches further")
    if notes:
        rec.note = "; ".join(([rec.note] if rec.note else []) + notes)
    # after work_s was recorded: the summary's problem builds (their walks charge work) count in no meter, so a
    # meter around solve() sees the solve's work_s (tests/test_short_limits.py)
    with work.unmetered():
        sol = summarise(spec, best, screening.cands, rec, costs, simulate=simulate, reranked=reranked, fits=kept,
                        mats=mats, robust=rob, alternatives_work_s=ALTERNATIVES_WORK_SHARE * budget,
                        walk_work_s=screen_mod.WALK_SHARE * budget)
    # checked after the summary (its simulation takes a while): a Ctrl-C at any point of the solve is reported,
    # so the command line's exit code (130) always matches the file's status
    if interrupt.requested():
        sol.solver.status = "INTERRUPTED"     # the best plan so far; its bound and gap still hold
    return sol


def estimate_plan(spec, cfg: ParallelConfig, mapping=None, costs: Costs | None = None, file: str | None = None,
                  check: bool = True):
    """Estimate one given plan (no search). mapping: None (Megatron rank order) or a worker list. check False: skip
    today's framework rules (check_config), for validations of runs an older stack made (SC21's interleaved pp 2
    with blocking p2p, which Megatron-LM has refused since)."""
    costs = costs or default_costs(spec.cluster)
    if check:
        check_config(spec, cfg, idle_ok=mapping is not None)     # a mapping places the plan: nodes outside it idle
    if mapping is None:
        lay = default_layout(cfg, spec.cluster.gpus_per_node)
        prob = build_problem(spec, cfg, lay, costs)
        assign = prob.rank_order()
    else:
        lay, grid = mapping_to_assign(mapping, cfg, spec.cluster.gpus_per_node, spec.cluster.nodes, file)
        prob = build_problem(spec, cfg, lay, costs)
        assign = grid
    return evaluate(spec, cfg, prob, assign, costs), lay, assign, prob


def check_cp(spec, cfg: ParallelConfig, flag: str) -> None:
    """Refuse a context-parallel degree Megatron-Core or the placement cannot run, naming the flag."""
    from planner.costs.context_parallel import cp_refusal
    why = cp_refusal(spec, cfg)
    if why:
        raise SpecError(None, flag, why)


def check_split(model, cfg: ParallelConfig, file: str | None, prefix: str = "config.") -> None:
    """Refuse an uneven first / last stage split Megatron-Core would refuse, naming the flag (prefix "--") or the
    solution field (prefix "config.")."""
    if not cfg.uneven:
        return
    def name(k):
        return f"--{k.replace('_', '-')}" if prefix == "--" else f"{prefix}{k}"
    which = name("first_stage_layers") if cfg.first_stage_layers is not None else (
        name("last_stage_layers") if cfg.last_stage_layers is not None else name("account_embedding"))
    if cfg.schedule in V_SHAPES:
        raise SpecError(file, which, f"uneven first / last stages are Megatron-Core's; {cfg.schedule} is not")
    try:
        cfg.stage_layers(model.num_layers)
    except ValueError as e:
        raise SpecError(file, which, f"{e} ({model.num_layers} layers, pp={cfg.pp}, {cfg.chunks} chunk(s) per "
                                     "stage; Megatron-Core's rule)") from None


def check_config(spec, cfg: ParallelConfig, idle_ok: bool = False) -> None:
    """Reject configs that do not fit the cluster or the model, naming the flag. idle_ok (a plan given with its
    mapping, which says which nodes it uses): fewer GPUs than the cluster's are fine, the other nodes idle, as a
    re-plan or a solve that leaves nodes idle writes them."""
    cl, m = spec.cluster, spec.model
    if cfg.num_gpus > cl.num_gpus or (cfg.num_gpus < cl.num_gpus and not idle_ok):
        raise SpecError(None, "--tp/--pp/--dp", f"tp*cp*pp*dp = {cfg.num_gpus} but the cluster has {cl.num_gpus} GPUs"
                        + ("" if cfg.num_gpus > cl.num_gpus else
                           "; a plan that leaves nodes idle (a re-plan, a solve with idle nodes) needs its placement: "
                           "`planner estimate ... --mapping SOLUTION` or `planner simulate SOLUTION`"))
    if cl.gpus_per_node % cfg.tp:
        raise SpecError(None, "--tp", f"tp={cfg.tp} must divide gpus_per_node={cl.gpus_per_node}")
    if m.num_attention_heads % cfg.tp or m.num_kv_heads % cfg.tp:
        raise SpecError(None, "--tp", f"tp={cfg.tp} must divide the {m.num_attention_heads} heads "
                                      f"and {m.num_kv_heads} kv heads")
    if cfg.pp == 1 and (cfg.schedule == "interleaved" or cfg.schedule in V_SHAPES):
        # the rule the flag parser states (cli.common.schedule_and_vpp), here for plans given as a config (a
        # solution, the library): the search builds pp 1 as 1F1B only
        raise SpecError(None, "--pp", f"1 with {cfg.schedule}: model chunks are placed over pipeline stages "
                        "(Megatron-Core: 'pipeline-model-parallel size should be greater than 1 with interleaved "
                        "schedule'; a V-shape folds two chunks over the stages); use pp > 1 or 1f1b")
    check_split(m, cfg, None, "--")
    if not cfg.uneven and m.num_layers % (cfg.pp * max(1, cfg.vpp)):
        hint = ("; V-shape schedules hold two equal chunks per stage and take no uneven split: choose a pp that "
                "divides half the layers, or 1f1b / interleaved with --first-stage-layers / --last-stage-layers"
                if cfg.schedule in V_SHAPES else
                "; or give the first and last stages fewer layers with --first-stage-layers / --last-stage-layers "
                "(Megatron-Core's --decoder-first/last-pipeline-num-layers)")
        raise SpecError(None, "--pp", f"pp*vpp={cfg.pp * cfg.vpp} must divide {m.num_layers} layers{hint}")
    why = interleaved_p2p_problem(spec.training, cfg.schedule, cfg.pp)
    if why:
        raise SpecError(None, "--pp", why + (f" ({spec.source} sets training.overlap.p2p false)" if spec.source
                                             else ""))
    if cfg.global_batch_size != spec.training.global_batch_size:
        raise SpecError(None, "--mbs", f"dp*mbs*microbatches={cfg.global_batch_size} != global batch "
                                       f"{spec.training.global_batch_size}")
    if cfg.schedule in V_SHAPES and cfg.num_microbatches < cfg.pp:
        # the rule the search keeps (search.space._schedules): the V-shapes' closed forms (costs.pipeline vzb_ramp,
        # v_shape_time) hold from m = pp; below it V-ZB's replay runs 17-60% past its estimate (pp 2-8, m 1 .. pp - 1)
        raise SpecError(None, "--mbs", f"{cfg.schedule} with {cfg.num_microbatches} micro-batches per replica (global "
                        f"batch / (dp x mbs)) on pp={cfg.pp}: the planner models the V-shapes from m >= pp (the "
                        "search builds no other); use a smaller micro-batch or dp, or 1f1b / zb-h1")
    if cfg.schedule == "interleaved" and cfg.num_microbatches % cfg.pp:
        # the planner's interleaved schedule takes micro-batches in groups of pp (Megatron-Core's default
        # microbatch_group_size_per_vp_stage): the search builds no other (search.space), the simulator runs no other
        # (simulator.orders.check) and the closed forms assume it (costs.pipeline)
        raise SpecError(None, "--mbs", f"interleaved needs the micro-batches per replica (global batch / (dp x mbs) = "
                        f"{cfg.num_microbatches}) divisible by pp={cfg.pp}: it takes them in groups of pp "
                        "(Megatron-Core's microbatch_group_size_per_vp_stage default)")
    why = engine_recompute_problem(spec.training.pipeline_engine, cfg.recompute)
    if why:
        raise SpecError(None, "--recompute", why)
    bad = zero3_problem(cfg)      # before cp's rules: HSDP with cp is refused naming --dp-shard, as the flags were
    if bad:
        raise SpecError(None, *bad)
    if cfg.cp > 1:
        check_cp(spec, cfg, "--cp")
    if cfg.zero == 0 and getattr(spec.training, "fp8_param_gather", False):
        raise SpecError(None, "--zero", "0: training.fp8_param_gather needs Megatron-Core's distributed optimizer, "
                        "ZeRO 1 or 2 (Megatron-LM megatron/training/arguments.py: '--fp8-param-gather only supported "
                        "with distributed optimizer, torch fsdp2, megatron fsdp, or inference mode')")
    why = sequence_parallel_problem(spec.training, cfg)
    if why:
        raise SpecError(None, "--sp", why)
    bad = fp8_shape_problem(m, spec.training, cfg, cl.gpu)
    if bad:
        flag = {"tp": "--tp", "micro_batch_size": "--mbs", "sequence_parallel": "--sp"}[bad[0]]
        raise SpecError(None, flag, bad[1])
    gpn = cl.gpus_per_node
    if cfg.zero == 3 and cfg.dp_shard and (gpn % cfg.dp_shard or not layouts(cfg.tp * cfg.cp, cfg.pp, cfg.dp, gpn,
                                                                             cfg.dp_shard)):
        # the rule search.dp_shard states (spec.plan._dp_shard, search.space.shard_sizes)
        w = cfg.tp * cfg.cp
        held = f" (at tp*cp = {w} a node holds at most {gpn // w} replica(s))" if not gpn % cfg.dp_shard else ""
        raise SpecError(None, "--dp-shard", f"{cfg.dp_shard}: HSDP's shard group lies inside one node: shard-group "
                        f"sizes > 1 that divide gpus_per_node={gpn}, on nodes that hold whole shard groups{held}")
    if not layouts(cfg.tp * cfg.cp, cfg.pp, cfg.dp, cl.gpus_per_node, cfg.dp_shard):
        raise SpecError(None, "--tp/--pp/--dp", "the config does not tile whole nodes")
