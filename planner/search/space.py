"""Enumerate the valid parallel configurations of a spec (before memory and mapping)."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from planner.config import (
    V_SHAPES,
    ParallelConfig,
    engine_recompute_problem,
    fp8_shape_problem,
    interleaved_p2p_problem,
    sequence_parallel_problem,
    split_layers,
    torchtitan_problem,
)
from planner.costs.context_parallel import auto_context_parallel, cp_refusal
from planner.mapping.problem import layouts


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


DEFAULT_MICRO_BATCHES = tuple(2 ** k for k in range(5))      # search.micro_batch_sizes unset: 1 .. 16


def micro_batch_options(spec, dp: int) -> list[int]:
    per_replica = spec.training.global_batch_size // dp
    opts = spec.search.micro_batch_sizes or DEFAULT_MICRO_BATCHES
    return [b for b in opts if b <= per_replica and per_replica % b == 0]


def unsearched_micro_batches(spec, num_gpus: int | None = None) -> list[int]:
    """Micro-batch sizes within the default's range (1 .. 16) that it leaves out (it takes powers of two) and that some
    data-parallel degree's batch per replica divides into; [] when search.micro_batch_sizes is given. A proof of
    optimality covers the searched sizes only, so the solution says which others exist (a batch of 30 on 2 replicas:
    3, 5, 6, 10, 15)."""
    if spec.search.micro_batch_sizes:
        return []
    G, gbs = num_gpus or spec.cluster.num_gpus, spec.training.global_batch_size
    out = set()
    for dp in divisors(G):
        if gbs % dp == 0:
            searched = set(micro_batch_options(spec, dp))
            out |= {b for b in divisors(gbs // dp) if b not in searched and b <= max(DEFAULT_MICRO_BATCHES)}
    return sorted(out)


def context_parallel_options(spec, num_gpus: int | None = None) -> tuple:
    """search.context_parallel, or for auto (None): 1 and every power of two 2 .. GPUs that the spec allows
    (context_parallel.auto_context_parallel: 2 * cp divides seq_length, some tp makes tp x cp part of a node or whole
    nodes), the degrees Megatron-Core / NeMo recipes use. The configurations' own rules (heads, exchange mode,
    framework) are cp_refusal's, per configuration."""
    cps = spec.search.context_parallel
    if cps is not None:
        return cps
    return (1,) + auto_context_parallel(spec.training.seq_length, spec.cluster.gpus_per_node,
                                        num_gpus or spec.cluster.num_gpus)


def _drop(dropped, field: str, why: str) -> None:
    """Record why a configuration the divisibility rules allow is not searched (enumerate_configs' `dropped`): the
    spec field to change, how many configurations, the first reason in words."""
    if dropped is not None:
        n, first = dropped.get(field, (0, why))
        dropped[field] = (n + 1, first)


def enumerate_configs(spec, num_gpus: int | None = None, dropped: dict | None = None) -> Iterator[ParallelConfig]:
    """Every (tp, cp, pp, dp, mbs, schedule, vpp, recompute, zero, sp) that satisfies the divisibility rules.

    tp stays inside a node and divides heads and kv heads; so does the tp x cp group (search.context_parallel;
    Megatron-Core's rules in context_parallel.cp_refusal); the layers split over pp (by 2pp for V-shapes,
    pp*v for interleaved) evenly or, for Megatron-Core's schedules, with the uneven first / last stages of
    `uneven_splits`; dp*mbs divides the global batch; all GPUs are used and tile whole nodes. The frameworks' own
    rules drop more: ZeRO-3 needs dp x cp > 1 and an HSDP shard size of search.dp_shard that fits; fp8_param_gather
    needs the distributed optimizer (ZeRO 1 / 2); sequence parallelism needs tp | seq_length / cp; fp8 GEMMs need
    Transformer Engine's / torchao's shapes (config.fp8_shape_problem). Block recompute comes with its N unset
    (screening picks the fewest that fits: search.screen.block_layers; space_key), and not where every chunk has
    one layer (then it is full recompute; on a ZeRO-3 plan, torchtitan's every n-th block: every rank, block_top).
    `dropped` (a dict), when given, collects
    {spec field: (configurations dropped, the first reason)} for those, so that an empty space can say why.
    """
    model, cl, s = spec.model, spec.cluster, spec.search
    G = num_gpus or cl.num_gpus
    tps = s.tensor_parallel or tuple(divisors(cl.gpus_per_node))
    for tp in tps:
        if cl.gpus_per_node % tp or model.num_attention_heads % tp or model.num_kv_heads % tp or G % tp:
            continue
        for cp in context_parallel_options(spec, G):
            # the exchange mode is legal for Megatron-Core's plans or torchtitan's (ZeRO-3): refused only if for both
            if G % (tp * cp) or (cp > 1 and cp_refusal(spec, ParallelConfig(tp, 1, 1, 1, 1, cp=cp))
                                 and cp_refusal(spec, ParallelConfig(tp, 1, 1, 1, 1, zero=3, cp=cp))):
                continue
            yield from _configs(spec, G, tp, cp, dropped)


def block_top(cfg: ParallelConfig, num_layers: int) -> int:
    """The largest N of block recompute that is neither full nor none: Megatron-Core's first N of each chunk, the
    largest chunk's layers - 1 (N >= every chunk is full); torchtitan's every n-th block (a ZeRO-3 plan's block,
    ParallelConfig.layer_sac), the largest rank's layers (n = 1 is full, a larger n checkpoints nothing). Below 1:
    block has no form between none and full here."""
    if cfg.layer_sac:
        top = max(cfg.stage_layers(num_layers))
        return top if top >= 2 else 0
    return max(map(max, cfg.chunk_layers(num_layers))) - 1


def block_as_full(cfg: ParallelConfig, num_layers: int) -> ParallelConfig:
    """Megatron-Core's block recompute whose N covers every chunk's layers (it checkpoints the first N layers of each
    chunk, one by one) is full recompute, the form the search has for it (block_top); other plans unchanged.
    torchtitan's every n-th block (a ZeRO-3 plan's block) is left: its n counts a rank's layers, not a chunk's."""
    if (cfg.recompute == "block" and not cfg.layer_sac and cfg.recompute_layers is not None
            and cfg.recompute_layers > block_top(cfg, num_layers)):
        return replace(cfg, recompute="full", recompute_layers=None)
    return cfg


def space_key(cfg: ParallelConfig) -> ParallelConfig:
    """A configuration as enumerate_configs yields it: block recompute's N unset (screening chooses it,
    search.screen.block_layers), so `space_key(cfg) in set(enumerate_configs(spec))` asks whether the space has it."""
    return replace(cfg, recompute_layers=None) if cfg.recompute_layers is not None else cfg


def zero_options(spec, dp: int, cp: int) -> tuple:
    """The ZeRO stages of search.zero to enumerate for dp x cp replicas (ZeRO shards over Megatron-Core's
    data-parallel-with-context-parallel group). With fp8_param_gather ZeRO-0 is out: Megatron-LM
    megatron/training/arguments.py asserts '--fp8-param-gather only supported with distributed optimizer, torch fsdp2,
    megatron fsdp, or inference mode'. With dp x cp = 1 the stages 0-2 cost the same (nothing to shard: memory and
    time are ZeRO-0's), so one of them is searched, the lowest the spec lists: the stage the user asked for, as it
    would run (Megatron-LM runs --use-distributed-optimizer with dp 1; [0, 1] keeps 0, [1] or [1, 2] keeps 1, [2]
    keeps 2, whose exports are ZeRO-2's), and the space stays one configuration per shape. ZeRO-3 has nothing to
    shard there: torchtitan would run it without FSDP, with mixed precision off under TP or PP (export's torchtitan
    refusal), so it is not searched; a search.zero of [3] alone has no configuration there."""
    pg = getattr(spec.training, "fp8_param_gather", False)
    zs = tuple(z for z in spec.search.zero if not (z == 0 and pg))
    if dp * cp > 1:
        return zs
    lower = [z for z in zs if z < 3]
    return (min(lower),) if lower else ()


def _configs(spec, G: int, tp: int, cp: int, dropped=None) -> Iterator[ParallelConfig]:
    model, cl, s, tr = spec.model, spec.cluster, spec.search, spec.training
    w = tp * cp                    # GPUs of one replica of a stage: the block width
    # Megatron-Core's plans (ZeRO 0-2) run this cp by cp_refusal's rules (e.g. allgather is torchtitan's, ZeRO-3 only);
    # they do not depend on dp or on which of ZeRO 0-2
    megatron_cp = cp == 1 or cp_refusal(spec, ParallelConfig(tp, 1, 1, 1, 1, cp=cp)) is None
    for pp in divisors(G // w):
        if s.pipeline_parallel and pp not in s.pipeline_parallel:
            continue
        if model.num_layers % pp and not ((s.uneven_stages or s.pipeline_split) and pp > 1):
            continue
        dp = G // (w * pp)
        if tr.global_batch_size % dp:
            continue
        lay = layouts(w, pp, dp, cl.gpus_per_node)
        if not lay or lay[0].blocks * lay[0].span > cl.nodes:
            continue
        zeros = zero_options(spec, dp, cp)
        if not zeros:
            _drop(dropped, "search.zero", f"tp={tp} pp={pp} dp={dp}" + (f" cp={cp}" if cp > 1 else "") +
                  ": search.zero has only 3, and ZeRO-3 (torchtitan's FSDP) needs dp x cp > 1: with one "
                  "data-parallel rank there is nothing to shard, and without FSDP torchtitan turns mixed precision "
                  "off under TP or PP (torchtitan/distributed/utils.py maybe_enable_amp)")
            continue
        for mbs in micro_batch_options(spec, dp):
            m = tr.global_batch_size // (dp * mbs)
            for sched, v, split in _schedules(spec, pp, m):
                for rc in s.recompute:
                    for z in zeros:
                        if z == 3 and cp > 1 and cp_refusal(spec, ParallelConfig(tp, 1, dp, 1, 1, zero=3, cp=cp)):
                            continue      # ZeRO-3 is torchtitan's FSDP: over dp x cp, PyTorch's CP exchange
                        if z != 3 and not megatron_cp:
                            continue      # e.g. allgather is torchtitan's (ZeRO-3): no Megatron-Core plan runs it
                        shards = shard_sizes(spec, tp, pp, dp) if z == 3 and cp == 1 else [0]
                        if not shards:
                            _drop(dropped, "search.dp_shard", f"tp={tp} pp={pp} dp={dp}: no size in search.dp_shard "
                                  f"{list(s.dp_shard)} is 0 or an HSDP shard group 1 < k < dp dividing dp={dp} "
                                  "whose group lies inside one node")
                        for sp in (s.sequence_parallel if tp > 1 else (False,)):
                            for shard in shards:
                                cfg = ParallelConfig(tp, pp, dp, mbs, m, sched, v, rc, z, sp, *split, cp=cp,
                                                     dp_shard=shard)
                                if z == 3 and torchtitan_problem(cfg):
                                    continue      # ZeRO-3 plans are torchtitan's: its schedules, splits and SP
                                why = engine_recompute_problem(tr.pipeline_engine, rc)
                                if why:
                                    _drop(dropped, "search.recompute", f"{cfg.label()}: {why}")
                                    continue
                                if rc == "block" and block_top(cfg, model.num_layers) < 1:
                                    _drop(dropped, "search.recompute", f"{cfg.label()}: one layer per model "
                                          "chunk (ZeRO-3, torchtitan's every n-th block: per rank), so block "
                                          "recompute of any N is full recompute")
                                    continue
                                why = sequence_parallel_problem(tr, cfg)
                                if why:
                                    _drop(dropped, "search.sequence_parallel", f"{cfg.label()}: {why}")
                                    continue
                                bad = fp8_shape_problem(model, tr, cfg, cl.gpu)
                                if bad:
                                    _drop(dropped, "training.precision", f"{cfg.label()}: {bad[1]}")
                                    continue
                                yield cfg


def shard_sizes(spec, tp: int, pp: int, dp: int) -> list[int]:
    """The spec's ZeRO-3 shard-group sizes (search.dp_shard) legal for this dp: 0 (all of dp), or HSDP's
    1 < k < dp with dp % k == 0 and a layout whose node holds a multiple of k replicas (the shard group stays inside
    a node; mapping.problem.layouts)."""
    gpn = spec.cluster.gpus_per_node
    return [k for k in spec.search.dp_shard if k == 0 or (1 < k < dp and dp % k == 0 and layouts(tp, pp, dp, gpn, k))]


EVEN = (None, None, False, False)      # ParallelConfig's split fields of the even split


def uneven_splits(num_layers: int, pp: int, chunks: int, deficits) -> list[tuple]:
    """Uneven splits to search for one (pp, chunks): (first_stage_layers, last_stage_layers, account_embedding,
    account_loss), each legal by Megatron-Core's rule (config.split_layers).

    The first and the last stage hold d_first * chunks and d_last * chunks layers fewer than a middle stage, for d in
    `deficits` (search.uneven_stages; auto: 0, 1, 2), not both 0: this balances the embedding and the output layer,
    and makes layer counts that pp does not divide legal (126 on pp 16 as 7 + 14 x 8 + 7). pp = 2 has no middle
    stage: one layer per chunk moves from one stage to the other (odd counts become legal). With interleaving
    (chunks > 1) and 1 in `deficits`, also the embedding and / or the loss accounted as a layer
    (--account-for-*-in-pipeline-split: one layer fewer in the first or last chunk only, NeMo's Llama 3.1 405B
    recipe), which the explicit counts cannot express.
    At most a handful per (pp, chunks), so the space grows by a small factor."""
    out: list[tuple] = []
    if pp < 2 or not deficits:
        return out
    c = chunks
    if pp == 2:
        for f in range(c, num_layers, c):       # one layer per chunk moved between the two stages, at most
            if 0 < abs(num_layers - 2 * f) <= 2 * c * min(max(deficits), 1) and (num_layers - f) % c == 0:
                out.append((f, num_layers - f, False, False))
    else:
        for mid in range(c, num_layers // (pp - 2) + 1, c):
            for d1 in deficits:
                for d2 in deficits:
                    f, last = mid - d1 * c, mid - d2 * c
                    if (d1 or d2) and f > 0 and last > 0 and f + last + (pp - 2) * mid == num_layers:
                        out.append((f, last, False, False))
    if c > 1 and 1 in deficits:
        out += [(None, None, e, lo) for e, lo in ((True, False), (False, True), (True, True))]
    legal = []
    for sp in out:
        try:
            split_layers(num_layers, pp, c, *sp)
        except ValueError:
            continue
        legal.append(sp)
    return legal


def _splits(spec, pp: int, chunks: int, uneven_ok: bool = True):
    """The even split when legal, then the uneven ones the spec asks for (Megatron-Core's schedules only); with
    search.pipeline_split that split alone."""
    L = spec.model.num_layers
    pinned = spec.search.pipeline_split
    if pinned is not None:        # the one split asked for, where Megatron-Core's rule takes it
        if uneven_ok:
            try:
                split_layers(L, pp, chunks, *pinned)
            except ValueError:
                return
            yield pinned
        return
    if L % (pp * chunks) == 0:
        yield EVEN
    if uneven_ok:
        yield from uneven_splits(L, pp, chunks, spec.search.uneven_stages)


def virtual_stage_options(spec, pp: int) -> tuple:
    """search.virtual_stages, or for auto: 2 and every v > 2 with whole, equal chunks on every stage."""
    if spec.search.virtual_stages is not None:
        return spec.search.virtual_stages
    L = spec.model.num_layers
    return tuple(v for v in range(2, L // pp + 1) if v == 2 or L % (pp * v) == 0)


def _schedules(spec, pp: int, m: int):
    seen_single = False
    for sched in spec.search.schedules:
        if pp == 1:
            if not seen_single:      # every schedule is the same without a pipeline
                seen_single = True
                yield "1f1b", 1, EVEN
            continue
        if sched == "interleaved":
            if interleaved_p2p_problem(spec.training, sched, pp):
                continue      # Megatron refuses it (estimate and simulate too: search.solve.check_config)
            for v in virtual_stage_options(spec, pp):
                if v > 1 and m % pp == 0:
                    for split in _splits(spec, pp, v):
                        yield sched, v, split
        elif sched in V_SHAPES:      # not Megatron-Core's: even splits only
            if m >= pp:
                for split in _splits(spec, pp, 2, uneven_ok=False):
                    yield sched, 2, split
        else:
            for split in _splits(spec, pp, 1):
                yield sched, 1, split
