"""Enumerate the valid parallel configurations of a spec (before memory and mapping)."""
from __future__ import annotations

from collections.abc import Iterator

from planner.config import V_SHAPES, ParallelConfig
from planner.mapping.problem import layouts


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def micro_batch_options(spec, dp: int) -> list[int]:
    per_replica = spec.training.global_batch_size // dp
    opts = spec.search.micro_batch_sizes or tuple(2 ** k for k in range(5))
    return [b for b in opts if b <= per_replica and per_replica % b == 0]


def enumerate_configs(spec, num_gpus: int | None = None) -> Iterator[ParallelConfig]:
    """Every (tp, pp, dp, mbs, schedule, vpp, recompute, zero, sp) that satisfies the divisibility rules.

    tp stays inside a node and divides heads and kv heads; pp divides the layers (by 2pp for V-shapes,
    pp*v for interleaved); dp*mbs divides the global batch; all GPUs are used and tile whole nodes.
    """
    model, cl, s = spec.model, spec.cluster, spec.search
    G = num_gpus or cl.num_gpus
    tps = s.tensor_parallel or tuple(divisors(cl.gpus_per_node))
    for tp in tps:
        if cl.gpus_per_node % tp or model.num_attention_heads % tp or model.num_kv_heads % tp or G % tp:
            continue
        for pp in divisors(G // tp):
            if model.num_layers % pp:
                continue
            dp = G // (tp * pp)
            if spec.training.global_batch_size % dp:
                continue
            lay = layouts(tp, pp, dp, cl.gpus_per_node)
            if not lay or lay[0].blocks > cl.nodes:
                continue
            for mbs in micro_batch_options(spec, dp):
                m = spec.training.global_batch_size // (dp * mbs)
                for sched, v in _schedules(spec, pp, m):
                    for rc in s.recompute:
                        for z in (s.zero if dp > 1 else (0,)):
                            for sp in (s.sequence_parallel if tp > 1 else (False,)):
                                yield ParallelConfig(tp, pp, dp, mbs, m, sched, v, rc, z, sp)


def _schedules(spec, pp: int, m: int):
    L = spec.model.num_layers
    seen_single = False
    for sched in spec.search.schedules:
        if pp == 1:
            if not seen_single:      # every schedule is the same without a pipeline
                seen_single = True
                yield "1f1b", 1
            continue
        if sched == "interleaved":
            for v in spec.search.virtual_stages:
                if v > 1 and L % (pp * v) == 0 and m % pp == 0:
                    yield sched, v
        elif sched in V_SHAPES:
            if L % (2 * pp) == 0 and m >= pp:
                yield sched, 2
        else:
            yield sched, 1
