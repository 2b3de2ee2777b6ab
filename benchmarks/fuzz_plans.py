"""Fuzz the space of *valid* plans: random combinations of the planner's knobs over the shipped specs.

    python benchmarks/fuzz_plans.py [--cases 500] [--seed 0] [--workers 1] [--cli-every 25] [--show 30]

Each case draws one shipped spec (specs/*.yaml, its model and cluster) and, on it, a configuration (tp, pp, dp, cp,
micro-batch, schedule with its v, an uneven first / last split or account_embedding / account_loss, recompute, sequence
parallelism, ZeRO 0-3 / HSDP) and training keys (precision bf16 / fp8 with its recipe and fp8_param_gather, attention
fused / unfused and attention_backend, the overlap flags, grad_reduce_in_fp32, cp_comm, now and then the deepspeed
pipeline engine). The spec's search lists are pinned to the drawn values (as `planner import megatron` pins a run), so
a refusal is the configuration's or the keys', not the search space's. Case i draws from its own generator
(seed, i): a case reproduces alone with `--only I`.

The named checks, each counted over the cases it applies to:
  refusal       the spec or the framework rules (search.solve.check_config) refuse with a SpecError naming a field,
                never another exception
  estimate      an accepted plan's iteration time and every stage's memory are finite and positive
  sim_time      the simulator runs it on the estimate's placement and agrees within the tolerance the project's
                tests use (tests/test_sim_engine.py test_agreement_with_closed_form: 5% for gpipe / 1F1B /
                interleaved / ZB-H1, 10% for the V-shapes; the distribution is printed for all)
  sim_memory    1F1B: the simulated per-GPU peak equals the estimate's per-stage total (rel 1e-6), the claim of
                tests/test_sim_engine.py (test_1f1b_memory_equals_estimator, test_recompute_and_fp8_memory_equal_the_
                estimator) and tests/test_uneven_stages.py; other schedules: the gap of the maxima is printed only
  overlap       turning on an overlap flag (grad_reduce, param_gather, p2p, tp_backward) never lengthens the
                estimate (exposed_s hides at most the transfer; tp_comm is left out: userbuffers' chunked GEMMs cost,
                docs/ARCHITECTURE.md)
  recompute     selective, mlp, block and full recompute never store more activations than none (per stage; not
                torchtitan's per-op policy, which under fp8 can)
  zero          ZeRO k+1 never holds more weights + gradients + optimizer state than k (k = 0, 1; 2 -> 3 without HSDP)
  fp8_gemm      an fp8 GEMM of the layer's shapes is faster than the bf16 one (ComputeModel.fp8_gemm_time)
  sp_memory     sequence parallelism (tp > 1) never stores more activations than without it
  export        the plan exports in its engine's formats (Megatron / torchrun / hostfile for ZeRO 0-1, torchtitan for
                ZeRO-3 and DDP, DeepSpeed for ZeRO 2-3 without tp / pp / cp) or is refused with a SpecError
  round_trip    a Megatron export imports back (planner import megatron's read_run) to the same configuration and
                the training keys the plan was costed with
  cli           every --cli-every'th case through the command line: estimate / simulate --json give the library's
                figures (or exit 2 naming a flag), and export of the solution file, and import megatron of its line
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import glob
import io
import json
import math
import os
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from planner.config import V_SHAPES, ParallelConfig  # noqa: E402
from planner.errors import SpecError  # noqa: E402
from planner.io import load_yaml  # noqa: E402

SPECS = sorted(glob.glob(os.path.join(ROOT, "specs", "*.yaml")))
SCHEDULES = ("1f1b", "interleaved", "zb-h1", "v-min", "v-half", "v-zb", "gpipe")
SCHED_W = (0.33, 0.30, 0.09, 0.07, 0.07, 0.09, 0.05)
TIME_TOL = {s: (0.10 if s in V_SHAPES else 0.05) for s in SCHEDULES}   # V-shapes 20% until Nov 27
MEM_REL = 1e-6
OVERLAP_FLAGS = ("grad_reduce", "param_gather", "p2p", "tp_backward")
CHECKS = ("refusal", "estimate", "sim_time", "sim_memory", "overlap", "recompute", "zero", "fp8_gemm", "sp_memory",
          "export", "round_trip", "cli")


# ---------------------------------------------------------------- drawing

_RAW: dict = {}


def _raw(path):
    if path not in _RAW:
        d = load_yaml(path)
        base = os.path.dirname(path)
        for k in ("model", "cluster"):
            if isinstance(d.get(k), str):
                d[k] = os.path.normpath(os.path.join(base, d[k]))
        _RAW[path] = d
    return copy.deepcopy(_RAW[path])


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def draw(seed: int, i: int) -> dict:
    """One case: the spec file, its data with the drawn training keys and pinned search, and the config dict."""
    rng = np.random.default_rng([seed, i])
    pick = lambda xs, p=None: xs[int(rng.choice(len(xs), p=p))]      # noqa: E731
    path = pick(SPECS)
    data = _raw(path)
    model, cluster = load_yaml(data["model"]), load_yaml(data["cluster"])
    tr = data["training"]
    gpn, nodes = int(cluster["gpus_per_node"]), int(cluster["nodes"])
    G, L, gbs = gpn * nodes, int(model["num_layers"]), int(tr["global_batch_size"])
    peaks = cluster["gpu"].get("peak_tflops", {})
    # training keys
    if "fp8" in peaks and rng.random() < 0.4 or rng.random() < 0.03:      # now and then fp8 where it is refused
        tr["precision"] = "fp8"
        tr["fp8_recipe"] = pick(["delayed", "tensorwise"])
        if rng.random() < 0.25:
            tr["fp8_param_gather"] = True
    elif tr.get("precision") != "fp16" and rng.random() < 0.05:
        tr["precision"] = "fp16"
    if "V100" not in cluster["gpu"]["type"]:
        if rng.random() < 0.2:
            tr["attention"] = "unfused"
        elif rng.random() < 0.5:
            tr["attention_backend"] = pick(["auto", "flash2", "cudnn"])
    tr["overlap"] = {k: bool(rng.random() < 0.75) for k in ("grad_reduce", "param_gather", "p2p", "tp_comm",
                                                              "tp_backward")}
    if not tr["overlap"]["grad_reduce"]:
        tr["overlap"]["param_gather"] = False              # param_gather needs grad_reduce (the spec's rule)
    if rng.random() < 0.3:
        tr["grad_reduce_in_fp32"] = True
    # configuration
    tp = pick([t for t in _divisors(gpn) if t <= 8])
    cp = pick([c for c in (1, 1, 1, 2, 4, 8) if (G // tp) % c == 0 and c * 2 <= tr["seq_length"]])
    if cp > 1:
        tr["cp_comm"] = pick(["auto", "ring", "all_to_all", "allgather"])
    rest = G // (tp * cp)
    pps = [p for p in _divisors(rest) if p <= min(32, L)]
    good = [p for p in pps if gbs % (rest // p) == 0 and L % p == 0]
    pp = pick(good) if good and rng.random() < 0.85 else pick(pps)
    dp = rest // pp
    sched = pick(SCHEDULES, SCHED_W) if pp > 1 else pick(["1f1b", "1f1b", "1f1b", "interleaved"])
    engine = "megatron"
    if sched == "1f1b" and rng.random() < 0.06:
        engine = tr["pipeline_engine"] = "deepspeed"
        tr["overlap"] = dict.fromkeys(tr["overlap"], False)       # DeepSpeed's engine overlaps none of them
        tr.pop("cp_comm", None) if cp == 1 else None
    vpp = 1
    if sched == "interleaved":
        vs = [v for v in (2, 3, 4, 6, 8) if L % (pp * v) == 0]
        vpp = pick(vs) if vs and rng.random() < 0.8 else pick([2, 3, 4])
    elif sched in V_SHAPES:
        vpp = 2
    chunks = vpp if sched == "interleaved" else (2 if sched in V_SHAPES else 1)
    mbss = [b for b in (1, 2, 4, 8) if gbs % (b * dp) == 0] or [1]
    mbs = pick(mbss)
    nmb = max(1, gbs // (mbs * dp))
    split = {}
    if pp > 1 and sched in ("1f1b", "interleaved") and rng.random() < 0.3:
        if rng.random() < 0.5:
            per = max(chunks, (L // pp) // chunks * chunks)
            d = int(rng.integers(1, 3)) * chunks
            which = pick(["first", "last", "both"])
            if which in ("first", "both"):
                split["first_stage_layers"] = max(chunks, per - d)
            if which in ("last", "both"):
                split["last_stage_layers"] = max(chunks, per - d)
        else:
            split["account_embedding"] = bool(rng.random() < 0.7)
            split["account_loss"] = bool(rng.random() < 0.7) or not split["account_embedding"]
    zero = pick([0, 1, 2, 3], [0.3, 0.35, 0.1, 0.25]) if engine == "megatron" else pick([0, 1])
    dp_shard = 0
    if zero == 3 and rng.random() < 0.3:
        hs = [s for s in _divisors(dp) if 1 < s < dp and gpn % s == 0]
        dp_shard = pick(hs) if hs else 0
    sp = tp > 1 and rng.random() < 0.65
    rc = pick(["none", "selective", "mlp", "block", "full"])
    if rc == "block":       # N: the first N layers of each model chunk (ParallelConfig.recompute_layers)
        split["recompute_layers"] = int(rng.integers(1, max(2, L // (pp * chunks))))
    cfg = dict(tp=tp, pp=pp, dp=dp, cp=cp, micro_batch_size=mbs, num_microbatches=nmb, schedule=sched, vpp=vpp,
               recompute=rc, zero=zero, sequence_parallel=sp, dp_shard=dp_shard, **split)
    # the search pinned to the drawn values (what a spec that asks for this plan lists)
    s = data.setdefault("search", {})
    s.update(schedules=[sched], zero=[zero], recompute=[rc], context_parallel=[cp])
    if dp_shard:
        s["dp_shard"] = [0, dp_shard]
    if sched == "interleaved":
        s["virtual_stages"] = [vpp]
    return {"i": i, "spec": path, "data": data, "cfg": cfg}


def repro(seed, case) -> str:
    c = case["cfg"]
    tr = case["data"]["training"]
    keys = {k: tr[k] for k in ("precision", "fp8_recipe", "fp8_param_gather", "attention", "attention_backend",
                               "grad_reduce_in_fp32", "cp_comm", "pipeline_engine") if k in tr}
    off = [k for k, v in tr["overlap"].items() if not v]
    flags = (f"--tp {c['tp']} --pp {c['pp']} --dp {c['dp']} --cp {c['cp']} --mbs {c['micro_batch_size']} "
             f"--schedule {c['schedule']}" + (f" --vpp {c['vpp']}" if c["schedule"] == "interleaved" else "")
             + f" --recompute {c['recompute']} --zero {c['zero']}" + (" --sp" if c["sequence_parallel"] else "")
             + (f" --dp-shard {c['dp_shard']}" if c["dp_shard"] else "")
             + "".join(f" --{k.replace('_', '-')} {c[k]}" for k in ("first_stage_layers", "last_stage_layers",
                                                                      "recompute_layers") if k in c)
             + "".join(f" --{k.replace('_', '-')}" for k in ("account_embedding", "account_loss") if c.get(k)))
    return (f"python benchmarks/fuzz_plans.py --seed {seed} --only {case['i']}   # {os.path.basename(case['spec'])} "
            f"{flags} training {keys} overlap off {off}")


# ---------------------------------------------------------------- checking

def _spec(data, path):
    from planner.spec.plan import parse_spec
    return parse_spec(data, path)


def _variant(data, path, cfg_d, **training):
    """(spec, cfg) with training keys changed (overlap.<k> by 'overlap_<k>'), or None when refused."""
    d = copy.deepcopy(data)
    for k, v in training.items():
        if k.startswith("overlap_"):
            d["training"]["overlap"][k[8:]] = v
        else:
            d["training"][k] = v
    try:
        return _spec(d, path)
    except SpecError:
        return None


def _est(spec, cfg):
    from planner.search.solve import estimate_plan
    try:
        return estimate_plan(spec, cfg)[0]
    except SpecError:
        return None


def _finite_pos(x) -> bool:
    return isinstance(x, float | int) and math.isfinite(x) and x > 0


def check_case(seed: int, case: dict, cli: bool) -> dict:
    """Run every check on one case: {'accepted', 'refused_by', 'fail': {check: why}, 'ran': [checks], 'agree': x}."""
    out = {"i": case["i"], "repro": repro(seed, case), "fail": {}, "ran": [], "agree": None, "mem_gap": None,
           "schedule": case["cfg"]["schedule"], "accepted": False, "refused_by": None}
    try:
        _check(case, out, cli)
    except Exception as e:       # a check itself broke: reported as that check's failure, with where
        tb = traceback.extract_tb(e.__traceback__)[-1]
        out["fail"].setdefault(out["ran"][-1] if out["ran"] else "refusal",
                               f"{type(e).__name__}: {e} at {os.path.relpath(tb.filename, ROOT)}:{tb.lineno}")
    return out


def _check(case, out, cli):
    from planner.costs import default_costs
    from planner.costs.memory import GiB
    from planner.search.solve import estimate_plan
    from planner.simulator import agreement, simulate

    path, data = case["spec"], case["data"]
    out["ran"].append("refusal")
    try:
        spec = _spec(data, path)
        cfg = ParallelConfig.from_dict(case["cfg"], None, "config")
        costs = default_costs(spec.cluster)
        est, lay, assign, prob = estimate_plan(spec, cfg, costs=costs)
    except SpecError as e:
        out["refused_by"] = e.field or "?"
        if not e.field:
            out["fail"]["refusal"] = f"SpecError naming no field: {e}"
        if cli:
            _cli_refused(case, out)
        return
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        out["fail"]["refusal"] = (f"{type(e).__name__} (not a SpecError): {e} at "
                                  f"{os.path.relpath(tb.filename, ROOT)}:{tb.lineno}")
        return
    out["accepted"] = True
    out["fits"] = est.fits
    out["ran"].append("estimate")
    bad = [f"{k}={getattr(est, k)}" for k in ("iteration_s", "compute_s") if not _finite_pos(getattr(est, k))]
    bad += [f"stage {s} memory {m.total}" for s, m in enumerate(est.memory) if not _finite_pos(m.total)]
    if not est.memory:
        bad.append("no stage memory")
    if bad:
        out["fail"]["estimate"] = ", ".join(bad)
        return

    # ---- simulator: time and memory
    out["ran"].append("sim_time")
    sim = simulate(spec, cfg, costs=costs, layout=lay, assign=assign, nodes=prob.nodes)
    a = agreement(sim, est)
    out["agree"] = a
    if not math.isfinite(a) or abs(a) > TIME_TOL[cfg.schedule]:
        out["fail"]["sim_time"] = (f"estimate {est.iteration_s:.4f} s, simulated {sim.iteration_s:.4f} s: "
                                   f"{a:+.2%} (tolerance {TIME_TOL[cfg.schedule]:.0%})")
    out["ran"].append("sim_memory")
    est_mem = [m.total / GiB for m in est.memory]
    out["mem_gap"] = sim.peak_memory_max_GiB / max(est_mem) - 1
    if cfg.schedule == "1f1b":
        worst = max(range(cfg.pp), key=lambda s: abs(sim.peak_memory_GiB[s] - est_mem[s]))
        if abs(sim.peak_memory_GiB[worst] - est_mem[worst]) > MEM_REL * est_mem[worst]:
            out["fail"]["sim_memory"] = (f"stage {worst}: simulated {sim.peak_memory_GiB[worst]:.4f} GiB, "
                                         f"estimate {est_mem[worst]:.4f} GiB")

    # ---- properties the model claims
    tr = data["training"]
    out["ran"].append("overlap")
    for flag in OVERLAP_FLAGS:
        if not tr["overlap"].get(flag):
            continue
        off = {"overlap_" + flag: False}
        if flag == "grad_reduce":
            off["overlap_param_gather"] = False
        sp_off = _variant(data, path, case["cfg"], **off)
        e_off = _est(sp_off, cfg) if sp_off else None
        if e_off is not None and est.iteration_s > e_off.iteration_s * (1 + 1e-9):
            out["fail"]["overlap"] = (f"overlap.{flag} on {est.iteration_s:.5f} s > off {e_off.iteration_s:.5f} s")
    # torchtitan's per-op policy (ZeRO-3 selective, cfg.op_sac) is exempt: it saves mm outputs in bf16, w2's unsharded
    # partial output among them (costs/memory.py op_sac_bytes), where no recompute keeps fp8 GEMM inputs, so under fp8
    # with tp > 1 it can store more (the fuzz's case 818: 121.4 against 117.5 GiB), as the policy does
    if cfg.recompute != "none" and not cfg.op_sac:
        out["ran"].append("recompute")
        e0 = _est(spec, replace(cfg, recompute="none", recompute_layers=None))
        if e0 is not None:
            worse = [s for s in range(cfg.pp) if est.memory[s].activations > e0.memory[s].activations * (1 + 1e-9)]
            if worse:
                s = worse[0]
                out["fail"]["recompute"] = (f"stage {s}: {cfg.recompute} stores {est.memory[s].activations / GiB:.3f}"
                                            f" GiB of activations, none {e0.memory[s].activations / GiB:.3f}")
    out["ran"].append("zero")
    if cfg.zero < 3 and not cfg.dp_shard:
        up = replace(cfg, zero=cfg.zero + 1)
        sp_up = spec if cfg.zero < 2 else _variant(data, path, case["cfg"], fp8_param_gather=False)
        if sp_up is not None:
            if cfg.zero == 2:      # the search list names the stage (spec rules on ZeRO-3: search.zero)
                d = copy.deepcopy(data)
                d["search"]["zero"] = [3]
                d["training"].pop("fp8_param_gather", None)
                try:
                    sp_up = _spec(d, path)
                except SpecError:
                    sp_up = None
            e_up = _est(sp_up, up) if sp_up is not None else None
            if e_up is not None:
                def state(e, s):
                    m = e.memory[s]
                    return m.weights + m.gradients + m.optimizer
                worse = [s for s in range(cfg.pp) if state(e_up, s) > state(est, s) * (1 + 1e-9)]
                if worse:
                    s = worse[0]
                    out["fail"]["zero"] = (f"stage {s}: ZeRO {up.zero} holds {state(e_up, s) / GiB:.3f} GiB of "
                                           f"weights+grads+optimizer, ZeRO {cfg.zero} {state(est, s) / GiB:.3f}")
    out["ran"].append("fp8_gemm")
    cm = costs.compute
    peaks = spec.cluster.gpu.peak_tflops
    if "fp8" in peaks and "bf16" in peaks:
        h = spec.model.hidden_size
        for tokens in (cfg.micro_batch_size * spec.training.seq_length // cfg.cp, 128):
            flops = 2.0 * tokens * h * max(1, spec.model.ffn_hidden_size // cfg.tp)
            t8 = cm.fp8_gemm_time(flops, peaks["bf16"] * 1e12, peaks["fp8"] * 1e12)
            t16 = cm._gemm_time(flops, peaks["bf16"] * 1e12)
            if not t8 < t16:
                out["fail"]["fp8_gemm"] = f"{flops:.3g} FLOPs: fp8 {t8 * 1e6:.2f} us >= bf16 {t16 * 1e6:.2f} us"
    out["ran"].append("sp_memory")
    if cfg.sequence_parallel and cfg.tp > 1:
        e_nosp = _est(spec, replace(cfg, sequence_parallel=False))
        if e_nosp is not None:
            worse = [s for s in range(cfg.pp)
                     if est.memory[s].activations > e_nosp.memory[s].activations * (1 + 1e-9)]
            if worse:
                s = worse[0]
                out["fail"]["sp_memory"] = (f"stage {s}: with SP {est.memory[s].activations / GiB:.3f} GiB, without "
                                            f"{e_nosp.memory[s].activations / GiB:.3f}")

    # ---- export, and the Megatron line back through the importer
    out["ran"].append("export")
    sol = _solution(spec, cfg, est, lay, assign, prob)
    sd = sol.as_dict()
    _exports(spec, cfg, sd, out)
    if cli:
        _cli_accepted(case, spec, cfg, est, sim, sol, out)


def _solution(spec, cfg, est, lay, assign, prob):
    from planner.solution import Solution, SolverRecord
    rec = SolverRecord("auto", "FEASIBLE", est.iteration_s, est.iteration_s, 0.0, 1, 0, 0, 1, 0)
    return Solution(spec, cfg, lay, assign, prob.nodes, est, rec)


def _exports(spec, cfg, sd, out):
    from planner import export as ex
    gpu, model, seq = spec.cluster.gpu.type, spec.model, spec.training.seq_length
    formats = {"torchrun": lambda: ex.torchrun_commands(sd, gpu_type=gpu, model=model, seq_length=seq),
               "hostfile": lambda: ex.hostfile(sd),
               "megatron": lambda: ex.megatron_args(sd, None, gpu, model, seq),
               "torchtitan": lambda: ex.torchtitan_toml(sd, None, model),
               "deepspeed": lambda: ex.deepspeed_config(sd, None, model)}
    # the formats that must take the plan (docs/ARCHITECTURE.md); the others may refuse it with a SpecError
    must = {"hostfile"}
    if cfg.zero in (0, 1):
        must |= {"megatron", "torchrun"}
    # torchtitan and DeepSpeed refuse much of what the planner costs (torchtitan: tp without SP, fewer micro-batches
    # than stages, fp16; DeepSpeed: tp / pp / cp): those refusals only have to be SpecErrors naming a field
    got = {}
    for name, fn in formats.items():
        try:
            got[name] = fn()
        except SpecError as e:
            if not e.field:
                out["fail"]["export"] = f"{name}: SpecError naming no field: {e}"
            elif name in must:
                out["fail"]["export"] = f"{name} refused a plan it runs: {e}"
        except Exception as e:
            tb = traceback.extract_tb(e.__traceback__)[-1]
            out["fail"]["export"] = (f"{name}: {type(e).__name__}: {e} at {os.path.relpath(tb.filename, ROOT)}:"
                                     f"{tb.lineno}")
    out["exported"] = sorted(got)
    # stock Megatron-LM's schedules on its own engine: the importer reads a Megatron-LM line (no fork's schedule, no
    # Megatron-DeepSpeed engine, whose export leaves the gradient dtype to the ds_config)
    if "megatron" in got and cfg.schedule in ("1f1b", "interleaved") and spec.training.pipeline_engine == "megatron":
        out["ran"].append("round_trip")
        why = _round_trip(spec, cfg, sd, got["megatron"])
        if why:
            out["fail"]["round_trip"] = why


def _round_trip(spec, cfg, sd, args) -> str | None:
    from planner import megatron_import as mi
    from planner.export import split_megatron_args
    flags, _ = split_megatron_args(args)
    try:
        run = mi.read_run(mi.parse_launch("torchrun pretrain_gpt.py " + " ".join(flags)), cfg.num_gpus)
    except SpecError as e:
        return f"the exported line does not import: {e}"
    from planner.search.space import block_as_full
    cfg = block_as_full(cfg, spec.model.num_layers)        # the importer's one rewrite
    if run.config != cfg:
        diff = {k: (v, getattr(run.config, k)) for k, v in vars(cfg).items() if getattr(run.config, k) != v}
        return f"config differs (planned, imported): {diff}"
    t, tr = spec.training, run.training
    want = {"precision": t.precision, "grad_reduce_in_fp32": t.grad_reduce_in_fp32 and t.precision != "fp32",
            "attention": t.attention, "attention_backend": t.attention_backend}
    have = {"precision": tr["precision"], "grad_reduce_in_fp32": tr.get("grad_reduce_in_fp32", False),
            "attention": tr.get("attention", "fused"), "attention_backend": tr.get("attention_backend", "auto")}
    if t.precision == "fp8":
        want.update(fp8_recipe=t.fp8_recipe, fp8_param_gather=t.fp8_param_gather)
        have.update(fp8_recipe=tr.get("fp8_recipe"), fp8_param_gather=tr.get("fp8_param_gather"))
    if cfg.cp > 1:
        want["cp_comm"], have["cp_comm"] = sd["cp_comm"], tr.get("cp_comm")
    o, ot = sd["overlap"], tr["overlap"]

    def eff(o):       # the settings that act on this configuration (export writes only those)
        return {"grad_reduce": o["grad_reduce"], "param_gather": o["param_gather"] and cfg.zero >= 1,
                "tp_comm": o["tp_comm"] and cfg.sequence_parallel and cfg.tp > 1,
                "p2p": o["p2p"] or not (cfg.schedule == "interleaved" and cfg.pp > 1)}
    want["overlap"], have["overlap"] = eff(o), eff(ot)
    if want != have:
        return "training differs: " + ", ".join(f"{k} {want[k]} -> {have[k]}" for k in want if want[k] != have[k])
    return None


# ---------------------------------------------------------------- the command line on a sample

def _run_cli(argv):
    from planner.cli.main import main
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        rc = main(argv)
    return rc, o.getvalue(), e.getvalue()


def _flags(c):
    f = ["--tp", c["tp"], "--pp", c["pp"], "--dp", c["dp"], "--cp", c["cp"], "--mbs", c["micro_batch_size"],
         "--schedule", c["schedule"], "--recompute", c["recompute"], "--zero", c["zero"]]
    if c["schedule"] == "interleaved":
        f += ["--vpp", c["vpp"]]
    if c["sequence_parallel"]:
        f.append("--sp")
    if c["dp_shard"]:
        f += ["--dp-shard", c["dp_shard"]]
    if c.get("recompute_layers"):
        f += ["--recompute-layers", c["recompute_layers"]]
    for k in ("first_stage_layers", "last_stage_layers"):
        if k in c:
            f += ["--" + k.replace("_", "-"), c[k]]
    f += ["--" + k.replace("_", "-") for k in ("account_embedding", "account_loss") if c.get(k)]
    return [str(x) for x in f]


def _write_spec(case, root):
    from planner.io import write_yaml
    p = os.path.join(root, "plan.yaml")
    write_yaml(p, case["data"])
    return p


def _cli_refused(case, out):
    out["ran"].append("cli")
    with tempfile.TemporaryDirectory() as root:
        p = _write_spec(case, root)
        rc, _, err = _run_cli(["estimate", p, *_flags(case["cfg"])])
    if rc != 2 or "Traceback" in err or "error:" not in err:
        out["fail"]["cli"] = f"estimate of a refused plan: exit {rc}, {err.strip()[-200:]!r}"


def _cli_accepted(case, spec, cfg, est, sim, sol, out):
    out["ran"].append("cli")
    with tempfile.TemporaryDirectory() as root:
        p = _write_spec(case, root)
        for cmd, want in (("estimate", est.iteration_s), ("simulate", sim.iteration_s)):
            rc, so, err = _run_cli([cmd, p, *_flags(case["cfg"]), "--json"])
            if rc not in (0, 1) or "Traceback" in err:
                out["fail"]["cli"] = f"{cmd}: exit {rc}, {err.strip()[-200:]!r}"
                return
            d = json.loads(so)
            got = (d["estimate"] if cmd == "estimate" else d)["iteration_s"]
            if abs(got - want) > 1e-9 * want:
                out["fail"]["cli"] = f"{cmd} --json iteration_s {got} != library {want}"
                return
        from planner.search.space import block_as_full
        from planner.spec.plan import parse_spec
        sol.spec = parse_spec(case["data"] | {}, p)       # the solution names the written spec file
        sp = os.path.join(root, "sol.yaml")
        sol.write(sp)
        fmts = ["hostfile"] + (["megatron", "torchrun"] if cfg.zero < 2 else []) + (
            ["torchtitan"] if "torchtitan" in out.get("exported", ()) else []) + (
            ["deepspeed"] if "deepspeed" in out.get("exported", ()) else [])
        for fmt in fmts:
            rc, so, err = _run_cli(["export", sp, "--format", fmt])
            if rc != 0 or "Traceback" in err:
                out["fail"]["cli"] = f"export --format {fmt}: exit {rc}, {err.strip()[-200:]!r}"
                return
            if fmt == "megatron" and "round_trip" in out["ran"]:
                line = os.path.join(root, "run.sh")
                with open(line, "w") as f:
                    f.write("torchrun --nnodes 1 --nproc-per-node 1 pretrain_gpt.py " + so)
                rc, so2, err = _run_cli(["import", "megatron", line, "-o", os.path.join(root, "imp.yaml"),
                                         "--cluster", case["data"]["cluster"], "--world-size", str(cfg.num_gpus),
                                         "--json"])
                if rc != 0 or "Traceback" in err:
                    out["fail"]["cli"] = f"import megatron of the export: exit {rc}, {err.strip()[-300:]!r}"
                    return
                got = ParallelConfig.from_dict(json.loads(so2)["config"])
                if got != block_as_full(cfg, spec.model.num_layers):     # the importer's one rewrite
                    out["fail"]["cli"] = f"import megatron: config {got.label()} != {cfg.label()}"
                    return


# ---------------------------------------------------------------- driver

def _one(args):
    seed, i, cli = args
    case = draw(seed, i)
    t0 = time.perf_counter()
    r = check_case(seed, case, cli)
    r["s"] = time.perf_counter() - t0
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--cli-every", type=int, default=25, help="every Nth case also through the command line (0: none)")
    ap.add_argument("--only", type=int, default=None, help="run case I alone (its reproduction)")
    ap.add_argument("--show", type=int, default=30, help="failing cases printed")
    args = ap.parse_args()
    ids = [args.only] if args.only is not None else range(args.cases)
    jobs = [(args.seed, i, args.only is not None or bool(args.cli_every and i % args.cli_every == 0)) for i in ids]
    t0 = time.perf_counter()
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(_one, jobs, chunksize=4))
    else:
        rows = [_one(j) for j in jobs]
    wall = time.perf_counter() - t0
    acc = [r for r in rows if r["accepted"]]
    print(f"{len(rows)} drawn plans (seed {args.seed}), {len(acc)} accepted ({sum(r.get('fits', 0) for r in acc)} fit "
          f"in memory), {len(rows) - len(acc)} refused, {wall:.0f} s")
    ref = collections.Counter(r["refused_by"] for r in rows if r["refused_by"])
    print("  refused, by the field named: " + ", ".join(f"{k} {v}" for k, v in ref.most_common()))
    for c in CHECKS:
        ran = sum(c in r["ran"] for r in rows)
        bad = sum(c in r["fail"] for r in rows)
        print(f"  {c:<11} {ran:4d} checked, {bad:3d} failed")
    for sch in SCHEDULES:
        a = np.array([r["agree"] for r in acc if r["schedule"] == sch and r["agree"] is not None])
        if a.size:
            q = np.percentile(a, [0, 5, 50, 95, 100])
            print(f"  estimate vs simulation, {sch:<11} n={a.size:3d}: min {q[0]:+.2%} p5 {q[1]:+.2%} "
                  f"median {q[2]:+.2%} p95 {q[3]:+.2%} max {q[4]:+.2%} (tolerance {TIME_TOL[sch]:.0%})")
    for sch in SCHEDULES:
        g = np.array([r["mem_gap"] for r in acc if r["schedule"] == sch and r["mem_gap"] is not None])
        if g.size and sch != "1f1b":
            print(f"  simulated / estimated peak - 1, {sch:<11} n={g.size:3d}: min {g.min():+.2%} "
                  f"median {np.median(g):+.2%} max {g.max():+.2%} (not claimed equal)")
    bad = [r for r in rows if r["fail"]]
    for r in bad[:args.show]:
        for c, why in r["fail"].items():
            print(f"  FAIL {c} case {r['i']}: {why}")
        print(f"    {r['repro']}")
    print("  slowest: " + ", ".join(f"case {r['i']} {r['s']:.1f}s" for r in sorted(rows, key=lambda r: -r["s"])[:3]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
