"""Why a spec has no valid parallel configuration: which divisibility rule binds, and the nearest values
of the batch, the micro-batch sizes, the layers and the node count that would give one.

enumerate_configs (space.py) yields nothing when every (tp, pp, dp) breaks some rule. Here each rule is
checked on its own for every (tp, pp, dp) that uses the GPUs, the rules that stop the most promising
triples are named, and each knob is moved until a configuration exists again.
"""
from __future__ import annotations

from dataclasses import replace

from planner.errors import PlannerError
from planner.mapping.problem import layouts
from planner.search.space import _schedules, divisors, enumerate_configs, micro_batch_options, uneven_splits


def _rules(spec, tp: int, pp: int, dp: int) -> list[tuple[str, str]]:
    """The rules (tp, pp, dp) breaks: (kind, the rule in words with the numbers)."""
    m, cl, B = spec.model, spec.cluster, spec.training.global_batch_size
    broken = []
    if cl.gpus_per_node % tp:
        broken.append(("node", f"tp={tp} must divide gpus_per_node={cl.gpus_per_node}"))
    if m.num_attention_heads % tp or m.num_kv_heads % tp:
        broken.append(("heads", f"tp={tp} must divide the {m.num_attention_heads} heads and "
                                f"{m.num_kv_heads} kv heads"))
    if m.num_layers % pp and not (pp > 1 and uneven_splits(m.num_layers, pp, 1, spec.search.uneven_stages)):
        broken.append(("layers", f"pp={pp} must divide the {m.num_layers} layers" + (
            " (or give an uneven first / last stage search.uneven_stages allows)" if spec.search.uneven_stages
            else "")))
    cp_why = _cp_rule(spec, tp)
    if cp_why:
        broken.append(("context parallel", cp_why))
    if B % dp:
        broken.append(("batch", f"dp={dp} must divide the global batch {B}"))
        return broken
    lay = layouts(tp, pp, dp, cl.gpus_per_node) if not cl.gpus_per_node % tp else []
    if not lay or lay[0].blocks > cl.nodes:
        broken.append(("tiling", f"tp*pp*dp = {tp}x{pp}x{dp} does not tile whole nodes of {cl.gpus_per_node} "
                                 f"GPUs (each node holds a stages x b replicas, a*b*tp = {cl.gpus_per_node})"))
    mbs = micro_batch_options(spec, dp)
    if not mbs:
        opts = list(spec.search.micro_batch_sizes or (1, 2, 4, 8, 16))
        broken.append(("micro-batch", f"no micro-batch size in {opts} divides the {B // dp} samples per "
                                      f"replica (global batch {B} / dp {dp})"))
    elif pp > 1 and not any(k == "layers" for k, _ in broken) and not any(list(_schedules(spec, pp, B // (dp * b)))
                                                                         for b in mbs):
        broken.append(("schedule", f"no schedule in {list(spec.search.schedules)} applies with pp={pp} "
                                   "(interleaved needs pp*v | layers and pp | micro-batches; V-shapes 2pp | layers)"))
    return broken


def _cp_rule(spec, tp: int) -> str | None:
    """Why no degree of search.context_parallel runs with this tp (context_parallel.cp_refusal, for the Megatron-Core
    plans and the ZeRO-3 plans the search has), or None when one does (or cp = 1 is searched)."""
    from planner.config import ParallelConfig
    from planner.costs.context_parallel import cp_refusal
    from planner.search.space import context_parallel_options
    cps = context_parallel_options(spec)
    if 1 in cps:
        return None
    zeros = sorted({3 if z == 3 else 0 for z in spec.search.zero})
    whys = {}
    for c in cps:
        for z in zeros:
            why = cp_refusal(spec, ParallelConfig(tp, 1, 1, 1, 1, zero=z, cp=c))
            if why is None:
                return None
            whys.setdefault(f"cp={c}: {why}", None)
    return "; ".join(whys)


def _has_config(spec, num_gpus: int) -> bool:
    return next(iter(enumerate_configs(spec, num_gpus)), None) is not None


def _has_config_with(spec, num_gpus: int, part: str, **change) -> bool:
    """Whether the spec with one part's fields changed has a configuration (False if the change is invalid)."""
    try:
        changed = replace(spec, **{part: replace(getattr(spec, part), **change)})
    except (ValueError, TypeError, PlannerError):
        return False
    return _has_config(changed, num_gpus)


def _nearest(values, works) -> list:
    """The closest value below and above (by distance) for which works(value) holds."""
    below = next((v for v in values[0] if works(v)), None)
    above = next((v for v in values[1] if works(v)), None)
    return [v for v in (below, above) if v is not None]


def why_no_config(spec, num_gpus: int | None = None) -> str:
    cl, m, t = spec.cluster, spec.model, spec.training
    G = num_gpus or cl.num_gpus
    tps = [tp for tp in (spec.search.tensor_parallel or divisors(cl.gpus_per_node)) if G % tp == 0]
    # only the pipeline degrees the search tries (enumerate_configs skips the others): a pp 1 triple outside
    # search.pipeline_parallel breaks none of the rules below and would be named "closest" with none
    pps = spec.search.pipeline_parallel
    triples = [(tp, pp, G // (tp * pp)) for tp in tps for pp in divisors(G // tp) if not pps or pp in pps]
    broken = {tri: _rules(spec, *tri) for tri in triples}
    fewest = min((len(b) for b in broken.values()), default=0)
    closest, kinds = [], set()
    for tri, b in broken.items():          # the triples nearest to valid, one per set of binding rules
        key = frozenset(k for k, _ in b)
        if len(b) == fewest and key not in kinds and len(closest) < 4:
            kinds.add(key)
            closest.append((tri, b))
    lines = [f"no valid parallel configuration for {G} GPUs ({G // cl.gpus_per_node} nodes x "
             f"{cl.gpus_per_node}), {m.num_layers} layers, {m.num_attention_heads} heads, global batch "
             f"{t.global_batch_size}: every (tp, pp, dp) breaks a rule. Closest:"]
    for (tp, pp, dp), b in closest:
        lines.append(f"  tp={tp} pp={pp} dp={dp}: " + "; ".join(text for _, text in b))
    if pps:
        counts = sorted({G // tp for tp in tps}, reverse=True)
        lines += [f"  search.pipeline_parallel {list(pps)}: pp={pp} divides none of the "
                  f"{', '.join(map(str, counts))} GPUs left by tp {' / '.join(map(str, tps))}"
                  for pp in pps if all(n % pp for n in counts)]
    fixes = nearest_fixes(spec, G)
    lines.append("Nearest values that give a configuration: " + ("; ".join(fixes) if fixes else "none found") + ".")
    return "\n".join(lines)


def nearest_fixes(spec, G: int, fewer_nodes: bool = True) -> list[str]:
    """The nearest spec values (global batch, micro-batch sizes, layers; with fewer_nodes, a node count) for which
    some configuration uses all G GPUs."""
    cl, m, t = spec.cluster, spec.model, spec.training
    B, L = t.global_batch_size, m.num_layers
    fixes = []

    batches = _nearest((range(B - 1, 0, -1), range(B + 1, 2 * B + 65)),
                       lambda v: _has_config_with(spec, G, "training", global_batch_size=v))
    if batches:
        fixes.append("training.global_batch_size " + " or ".join(map(str, batches)))
    if spec.search.micro_batch_sizes and _has_config_with(spec, G, "search", micro_batch_sizes=None):
        fixes.append("search.micro_batch_sizes: auto (powers of two that divide)")
    if spec.search.tensor_parallel and _has_config_with(spec, G, "search", tensor_parallel=None):
        fixes.append("search.tensor_parallel: auto (every divisor of gpus_per_node)")
    if spec.search.pipeline_parallel and _has_config_with(spec, G, "search", pipeline_parallel=None):
        fixes.append("search.pipeline_parallel: auto (every degree the GPUs and layers allow)")
    layers = _nearest((range(L - 1, 0, -1), range(L + 1, 2 * L + 1)),
                      lambda v: _has_config_with(spec, G, "model", num_layers=v))
    if layers:
        fixes.append("model.num_layers " + " or ".join(map(str, layers)))
    nodes = [k for k in range(cl.nodes, 0, -1) if k * cl.gpus_per_node != G
             and _has_config(spec, k * cl.gpus_per_node)][:1] if fewer_nodes else []
    if nodes:
        fixes.append(f"{nodes[0]} of the {cl.nodes} nodes")
    return fixes
