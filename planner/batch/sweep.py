"""Sweep specs: many models x clusters x GPU counts x batches, expanded to cases with stable ids.

A sweep YAML (see sweeps/*.yaml and docs/notes/batch.md):

    name: gpt-sizes-a100-128             # names OUT/<name>.csv: a plain file name (default: the file's)
    models: [../models/gpt3-13b.yaml, {name: tiny, num_layers: 4, ...}]   # paths or inline
    grid:                                 # and/or a grid of generated models
      family: gpt
      vocab_size: 50257
      parameters_B: {from: 1, to: 100, count: 100}      # or a list; uses the shape rule
      shape_rule: {aspect_ratio: 128, layer_multiple: 4, hidden_multiple: 128, heads_multiple: 8}
      # llama: also kv_heads, ffn_multiplier, ffn_multiple (Llama 3: 8, 1.3, 1024; docs/notes/batch.md)
      # or explicit shapes (cartesian product; combinations that do not divide are skipped):
      # num_layers: [24, 32], hidden_size: [2048, 4096], num_attention_heads: [16, 32]
    clusters: [../clusters/a100-16x8-hdr.yaml, {path: ..., gpus: [64, 128], price_per_gpu_hour_usd: 1.5}]
    gpus: [128]                           # default GPU counts (whole nodes); default: the whole cluster
    training: {global_batch_size: [512], seq_length: [2048], precision: bf16, tokens: [3.0e11] | chinchilla}
    search: {...}                         # as in plan specs
    solver: {method: auto, time_limit_s: 2, seed: 0}
    sizing: {budget_gpu_days: [1000, 5000]}   # optional compute-optimal sizing per cluster x GPU count

Shape rule (target parameter count N -> layers L, hidden h, heads a), documented in docs/notes/batch.md:
a transformer block holds ~12 h^2 parameters (GPT: 4h^2 attention + 8h^2 MLP; Llama: 4h^2 + 3*h*(8/3)h),
and GPT-3 / Megatron keep h / L ~= 128 (13B: 5120/40, 175B: 12288/96, 530B: 20480/105). So
L0 = (N / (12 * r^2))^(1/3) with r the aspect ratio; we then scan L over multiples of `layer_multiple`
within [0.7 L0, 1.4 L0] and h over multiples of `hidden_multiple` and keep the pair whose exact
parameter count (ModelSpec.num_params, embeddings included) is within `tolerance` (2%) of N and whose
h / L is closest to r (if no pair is within the tolerance, the closest count wins).
Heads: a multiple of `heads_multiple` (so tensor parallel up to 8 divides them) that divides h with
head_dim closest to 128.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass, field

from planner.errors import SpecError
from planner.io import load_yaml
from planner.spec.cluster import ClusterSpec, parse_cluster
from planner.spec.fields import FieldError, Fields
from planner.spec.model import FAMILIES, ModelSpec, parse_model
from planner.spec.plan import Spec, TrainingSpec, _parse_search, _parse_solver, _parse_training, parse_spec

CHINCHILLA_TOKENS_PER_PARAM = 20.0     # Hoffmann et al. 2022: compute-optimal tokens ~= 20 x parameters
SWEEP_LISTS = ("global_batch_size", "seq_length", "tokens")    # training keys a sweep lists (its grid); the others
#                                                                are a plan spec's, one value for every case


@dataclass(frozen=True)
class ShapeRule:
    aspect_ratio: float = 128.0       # hidden / layers
    layer_multiple: int = 4           # layers divisible by this (pipeline stages divide layers)
    hidden_multiple: int = 128
    heads_multiple: int = 8           # tensor parallel up to 8 must divide the heads
    head_dim: int = 128               # preferred head dimension
    tolerance: float = 0.02           # relative parameter error accepted to stay near the aspect ratio
    kv_heads: int = 0                 # grouped-query attention's key / value heads (0: as many as query heads)
    ffn_multiplier: float = 1.0       # llama: MLP width int(m x int(8h/3)) rounded up to ffn_multiple (Meta's rule)
    ffn_multiple: int = 256

    def __post_init__(self):
        # heads are multiples of heads_multiple: a kv_heads dividing it divides every head count the rule picks
        if self.kv_heads < 0 or (self.kv_heads and self.heads_multiple % self.kv_heads):
            raise ValueError(f"kv_heads must be 0 or divide heads_multiple ({self.heads_multiple})")
        if self.ffn_multiplier <= 0 or self.ffn_multiple < 1:
            raise ValueError("ffn_multiplier must be positive and ffn_multiple at least 1")

    def id_part(self) -> dict:
        """The keys that shape a model beyond its layers / hidden / heads, where they differ from the defaults (so
        that the ids of sweeps without them stay as they were)."""
        d = ShapeRule()
        return {k: getattr(self, k) for k in ("kv_heads", "ffn_multiplier", "ffn_multiple")
                if getattr(self, k) != getattr(d, k)}


# ffn_multiplier a shape rule accepts (Llama 3's is 1.3), in sweeps and `planner size` alike
FFN_MULTIPLIER_RANGE = (0.1, 16.0)


@functools.lru_cache(maxsize=8192)
def _heads_for(h: int, rule: ShapeRule) -> int:
    """The head count (a multiple of rule.heads_multiple dividing h) whose head size is nearest rule.head_dim.
    Cached: a size grid asks for the same few hundred hidden sizes again and again (~5 s per grid uncached)."""
    best = None
    for a in range(rule.heads_multiple, h + 1, rule.heads_multiple):
        if h % a:
            continue
        score = abs(math.log((h / a) / rule.head_dim))
        if best is None or score < best[0] - 1e-12:
            best = (score, a)
    if best is None:
        raise ValueError(f"no head count that is a multiple of {rule.heads_multiple} divides hidden {h}")
    return best[1]


def shape_for_params(params: float, family: str = "gpt", vocab_size: int = 50257, rule: ShapeRule | None = None,
                     name: str | None = None, seq_length: int = 2048) -> ModelSpec:
    """The model of about `params` parameters under the shape rule (see module doc)."""
    rule = rule or ShapeRule()
    if params <= 0:
        raise ValueError("params must be positive")
    r = rule.aspect_ratio
    L0 = (params / (12.0 * r * r)) ** (1.0 / 3.0)
    lm, hm = rule.layer_multiple, rule.hidden_multiple
    lo = max(lm, lm * math.floor(0.7 * L0 / lm))
    hi = max(lo, lm * math.ceil(1.4 * L0 / lm))
    best = None
    for L in range(lo, hi + 1, lm):
        for h in _hidden_candidates(params, L, family, vocab_size, hm, seq_length, rule):
            a = _heads_for(h, rule)
            m = _model(name or "", family, L, h, a, vocab_size, seq_length, rule)
            err = abs(m.num_params() - params) / params
            # within the tolerance the aspect ratio decides; outside it, the parameter error does
            score = (0.0 if err <= rule.tolerance else err, abs(math.log((h / L) / r)))
            if best is None or score < best[0]:
                best = (score, m)
    m = best[1]
    label = name or f"{family}-{_fmt_params(m.num_params())}"
    return _model(label, family, m.num_layers, m.hidden_size, m.num_attention_heads, vocab_size, seq_length, rule)


def _hidden_candidates(params, L, family, vocab, hm, seq, rule=None):
    # the exact count is a quadratic in h; bracket the root and try the multiples on both sides
    def n(h):
        return _model("", family, L, h, hm_heads(h, hm), vocab, seq, rule).num_params()
    h = hm
    while n(h) < params and h < 1 << 20:
        h *= 2
    lo, hi = max(hm, h // 2), h
    while hi - lo > hm:
        mid = (lo + hi) // 2 // hm * hm
        if mid <= lo:
            break
        lo, hi = (mid, hi) if n(mid) < params else (lo, mid)
    return sorted({max(hm, lo), hi})


def hm_heads(h: int, hm: int) -> int:
    """A head count dividing h, only for parameter counting (heads do not change the count)."""
    return h // hm if h % hm == 0 else 1


def _model(name, family, L, h, a, vocab, seq, rule: ShapeRule | None = None) -> ModelSpec:
    rule = rule or ShapeRule()
    if family == "gpt":
        ffn = 4 * h
    else:   # Meta's FeedForward: int(2 * 4h / 3), times ffn_dim_multiplier, rounded up to multiple_of
        q = rule.ffn_multiple
        ffn = q * -(-int(rule.ffn_multiplier * int(8 * h / 3)) // q)
    kv = rule.kv_heads if rule.kv_heads and a % rule.kv_heads == 0 else a
    return ModelSpec(name=name, family=family, num_layers=L, hidden_size=h, num_attention_heads=a, num_kv_heads=kv,
                     ffn_hidden_size=ffn, vocab_size=vocab, tied_embeddings=family == "gpt",
                     max_position_embeddings=max(2048, seq))


def _fmt_params(n: float) -> str:
    # three significant digits; a count that rounds up to 1000 of a unit is named in the next one (not "1e+03b")
    if n >= 999.5e9:
        return f"{n / 1e12:.3g}t"
    return f"{n / 1e9:.3g}b" if n >= 999.5e6 else f"{n / 1e6:.3g}m"


@dataclass(frozen=True)
class ClusterEntry:
    cluster: ClusterSpec
    gpus: tuple                      # GPU counts to plan for (whole nodes)
    price_per_gpu_hour_usd: float | None
    ref: object = None               # the cluster's path or inline mapping (the plan-spec rules are checked on it)


@dataclass(frozen=True)
class Case:
    """One planning problem of a sweep; `id` is stable across runs for the same content."""
    id: str
    spec: Spec
    model_label: str
    cluster_label: str
    gpus: int
    tokens: float | None             # token budget for time / cost (None: not priced)
    price_per_gpu_hour_usd: float | None

    @property
    def params(self) -> int:
        return self.spec.model.num_params()


@dataclass(frozen=True)
class SizingTask:
    id: str
    cluster: ClusterSpec
    cluster_label: str
    gpus: int
    budget_gpu_days: float
    training: TrainingSpec
    search: object
    solver: object
    family: str
    vocab_size: int
    rule: ShapeRule
    price_per_gpu_hour_usd: float | None


@dataclass
class Sweep:
    name: str
    cases: list = field(default_factory=list)
    sizing: list = field(default_factory=list)
    skipped: list = field(default_factory=list)   # (what, why) of grid points dropped while expanding
    source: str | None = None


def load_sweep(path: str) -> Sweep:
    return parse_sweep(load_yaml(path), path)


def _num_list(f: Fields, key: str, default, *, integer: bool) -> list:
    vals = f.list(key, default)
    out = []
    for i, v in enumerate(vals):
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                raise f.error(key, f"item {i} must be a number, got {v!r}") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise f.error(key, f"item {i} must be a positive number, got {v!r}")
        if integer:
            if float(v) != int(v):
                raise f.error(key, f"item {i} must be an integer, got {v!r}")
            v = int(v)
        out.append(v)
    if not out:
        raise f.error(key, "must not be empty")
    return list(dict.fromkeys(out))


def _param_targets(g: Fields) -> list[float]:
    v = g.raw("parameters_B")
    if isinstance(v, dict):
        r = Fields(v, g.file, g.path("parameters_B"))
        a, b = r.float("from"), r.float("to")
        n = r.int("count")
        scale = r.str("scale", "log", choices=("log", "linear"))
        r.done()
        if b < a:
            raise g.error("parameters_B", f"'to' ({b}) must not be smaller than 'from' ({a})")
        if n == 1:
            return [a * 1e9]
        if scale == "log":
            return [1e9 * a * (b / a) ** (k / (n - 1)) for k in range(n)]
        return [1e9 * (a + (b - a) * k / (n - 1)) for k in range(n)]
    return [1e9 * x for x in _num_list(g, "parameters_B", None, integer=False)]


def _llama_shape_keys(f: Fields, family: str, heads_multiple: int) -> dict:
    """A shape rule's llama keys (kv_heads, ffn_multiplier, ffn_multiple) from a sweep's shape_rule, checked: the one
    reader of the grid's and the sizing's rule. gpt refuses them (multi-head attention, a 4h MLP)."""
    kv = f.int("kv_heads", 0, min_value=0)
    if kv and heads_multiple % kv:
        raise f.error("kv_heads", f"must divide heads_multiple ({heads_multiple}), which every generated head count "
                      "is a multiple of")
    keys = {"kv_heads": kv,
            "ffn_multiplier": f.float("ffn_multiplier", 1.0, min_value=FFN_MULTIPLIER_RANGE[0],
                                      max_value=FFN_MULTIPLIER_RANGE[1]),
            "ffn_multiple": f.int("ffn_multiple", 256, min_value=1)}
    given = ShapeRule(**keys).id_part()
    if family == "gpt" and given:
        raise f.error(next(iter(given)), "shapes grouped-query attention and the gated MLP of family llama; a gpt "
                      "block has multi-head attention and a 4h MLP")
    return keys


def _grid_models(g: Fields, seq_max: int, skipped: list) -> list[ModelSpec]:
    family = g.str("family", "gpt", choices=FAMILIES)
    vocab = g.int("vocab_size", 50257)
    models = []
    if g.has("parameters_B"):
        for k in ("num_layers", "hidden_size", "num_attention_heads"):
            if g.has(k):
                raise g.error(k, "give either parameters_B (with shape_rule) or explicit shapes, not both")
        rf = g.sub("shape_rule", {})
        hmul = rf.int("heads_multiple", 8)
        rule = ShapeRule(rf.float("aspect_ratio", 128.0), rf.int("layer_multiple", 4), rf.int("hidden_multiple", 128),
                         hmul, rf.int("head_dim", 128), rf.float("tolerance", 0.02, max_value=0.5),
                         **_llama_shape_keys(rf, family, hmul))
        rf.done()
        if rule.hidden_multiple % rule.heads_multiple:
            raise rf.error("hidden_multiple", f"must be a multiple of heads_multiple ({rule.heads_multiple})")
        seen = set()
        for n in _param_targets(g):
            m = shape_for_params(n, family, vocab, rule, seq_length=seq_max)
            key = (m.num_layers, m.hidden_size)
            if key in seen:
                skipped.append((f"{n / 1e9:.3g}B", f"rounds to the same shape as an earlier size ({m.name})"))
                continue
            seen.add(key)
            models.append(m)
    else:
        g.raw("shape_rule", None)
        Ls = _num_list(g, "num_layers", None, integer=True)
        Hs = _num_list(g, "hidden_size", None, integer=True)
        As = _num_list(g, "num_attention_heads", None, integer=True)
        for L in Ls:
            for h in Hs:
                for a in As:
                    if h % a:
                        skipped.append((f"L{L} h{h} a{a}", f"hidden {h} is not divisible by {a} heads"))
                        continue
                    name = f"{family}-L{L}-h{h}-a{a}"
                    models.append(_model(name, family, L, h, a, vocab, seq_max))
    g.done()
    return models


def _cluster_entries(f: Fields, base: str, default_gpus, default_price) -> list[ClusterEntry]:
    items = f.list("clusters")
    if not items:
        raise f.error("clusters", "must list at least one cluster")
    out = []
    for i, it in enumerate(items):
        key = f"clusters[{i}]"
        gpus, price = default_gpus, default_price
        if isinstance(it, dict) and "path" in it:
            c = Fields(it, f.file, f.path(key))
            ref = c.str("path")
            if c.has("gpus"):
                gpus = _num_list(c, "gpus", None, integer=True)
            price = c.float("price_per_gpu_hour_usd", price)
            c.done()
        else:
            ref = it
        if isinstance(ref, str):
            path = os.path.normpath(os.path.join(base, ref))
            if not os.path.exists(path):
                raise f.error(key, f"file {path} does not exist")
            cl = parse_cluster(load_yaml(path, f.file), path)
        elif isinstance(ref, dict):
            cl = parse_cluster(ref, f.file, f.path(key))
        else:
            raise f.error(key, f"must be a cluster path, an inline cluster or {{path, gpus}}, got {ref!r}")
        counts = gpus or [cl.num_gpus]
        for g in counts:
            if g % cl.gpus_per_node or g > cl.num_gpus:
                what = (f"{g} GPUs is more than {cl.name}'s {cl.num_gpus}" if g > cl.num_gpus
                        else f"{g} GPUs is not a whole number of {cl.name}'s nodes")
                raise f.error(key if gpus is not default_gpus else "gpus",
                              f"{what} ({cl.gpus_per_node} GPUs each, {cl.nodes} nodes)")
        if price is None:
            price = cl.price_per_gpu_hour_usd
        out.append(ClusterEntry(cl, tuple(sorted(set(counts))), price, path if isinstance(ref, str) else ref))
    return out


def subset_cluster(cl: ClusterSpec, gpus: int) -> ClusterSpec:
    """The first gpus / gpus_per_node nodes of the cluster (its measured links among them)."""
    k = gpus // cl.gpus_per_node
    return cl if k == cl.nodes else cl.subset(list(range(k)))


# search fields added after sweep case ids were pinned (tests/test_sweep.py): left out of an id while at their default
# (None), so the result files of earlier runs keep resuming
_SEARCH_ID_LATER = ("pipeline_parallel", "pipeline_split")


def _search_id(search) -> dict:
    return {k: v for k, v in search.__dict__.items() if not (k in _SEARCH_ID_LATER and v is None)}


def _stable_id(label: str, content: dict) -> str:
    blob = json.dumps(content, sort_keys=True, default=str).encode()
    return f"{label}-{hashlib.sha256(blob).hexdigest()[:8]}"


def _file_name(f: Fields, key: str, default: str) -> str:
    """A string that names the output files (OUT/<name>.csv, ...): a plain file name, so that they stay in OUT."""
    v = f.str(key, default)
    seps = {"/", "\\", "\0"} | {s for s in (os.sep, os.altsep) if s}
    if v in ("", ".", "..") or any(c in v for c in seps):
        raise f.error(key, f"must be a plain file name (no path separators, not '.' or '..'), got {v!r}")
    return v


def parse_sweep(data, file: str | None = None) -> Sweep:
    f = Fields(data, file)
    base = os.path.dirname(file) if file else "."
    name = _file_name(f, "name", os.path.splitext(os.path.basename(file))[0] if file else "sweep")
    f.raw("description", None)

    t = f.sub("training")
    gbs_list = _num_list(t, "global_batch_size", None, integer=True)
    seq_list = _num_list(t, "seq_length", [2048], integer=True)
    tok = t.raw("tokens", None)
    if tok == "chinchilla":
        tokens_list = ["chinchilla"]
    elif tok is None:
        tokens_list = [None]
    else:
        tokens_list = _num_list(t, "tokens", None, integer=False)
    # every other key is a plan spec's training key, one value for the whole sweep, read by the plan spec's own
    # reader (precision, optimizer, fp8_recipe, fp8_param_gather, overlap, cp_comm, ...): unknown keys and bad
    # values are refused as `solve` refuses them, naming training.<key> in the sweep file
    same = {k: t.raw(k) for k in list(t.data) if k not in SWEEP_LISTS}
    t.done()
    training_raw = {**same, "global_batch_size": gbs_list[0], "seq_length": seq_list[0]}
    base_training = _parse_training(Fields(training_raw, file, t.prefix))

    def training_for(gbs: int, seq: int, tokens=None) -> TrainingSpec:
        return dataclasses.replace(base_training, global_batch_size=gbs, seq_length=seq, tokens=tokens)

    skipped: list = []
    models: list[tuple[ModelSpec, str]] = []
    for i, m in enumerate(f.list("models", [])):
        key = f"models[{i}]"
        if isinstance(m, str):
            path = os.path.normpath(os.path.join(base, m))
            if not os.path.exists(path):
                raise f.error(key, f"file {path} does not exist")
            models.append((parse_model(load_yaml(path, f.file), path), path))
        elif isinstance(m, dict):
            models.append((parse_model(m, f.file, f.path(key)), f.file))
        else:
            raise f.error(key, f"must be a model path or an inline model, got {m!r}")
    if f.has("grid"):
        for m in _grid_models(f.sub("grid"), max(seq_list), skipped):
            models.append((m, "grid"))
    if not models:
        raise f.error("models", "the sweep needs models (a list) or a grid")
    names = [m.name for m, _ in models]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise f.error("models", f"two models are named {dup!r}; names label the rows and must be unique")

    default_gpus = _num_list(f, "gpus", None, integer=True) if f.has("gpus") else None
    default_price = f.float("price_per_gpu_hour_usd", None)
    entries = _cluster_entries(f, base, default_gpus, default_price)

    search_data = f.raw("search", {}) or {}
    solver = _parse_solver(f.sub("solver", {"time_limit_s": 5.0}))
    sizing_f = f.sub("sizing", {})
    budgets = _num_list(sizing_f, "budget_gpu_days", [], integer=False) if sizing_f.has("budget_gpu_days") else []
    sizing_family = sizing_f.str("family", "gpt", choices=FAMILIES)
    sizing_vocab = sizing_f.int("vocab_size", 50257)
    sizing_rule = ShapeRule()
    if sizing_f.has("shape_rule"):      # llama blocks only: grouped-query attention and the MLP width (Llama 3)
        sr = sizing_f.sub("shape_rule")
        if sizing_family == "gpt":
            raise sizing_f.error("shape_rule", "shapes grouped-query attention and the gated MLP of family llama")
        sizing_rule = ShapeRule(**_llama_shape_keys(sr, sizing_family, ShapeRule().heads_multiple))
        sr.done()
    sizing_f.done()
    f.done()

    cases = []
    search_cache = {}
    for entry in entries:
        cl = entry.cluster
        key = id(cl)
        if key not in search_cache:   # search options are validated against the cluster (tp | gpus_per_node)
            search_cache[key] = _parse_search(Fields(search_data, file, "search"), cl)
            for seq in seq_list:      # and the plan spec's rules across its parts, as `solve` checks a spec
                _check_plan_rules(file, entry, models[0][0], {**training_raw, "seq_length": seq}, search_data)
        search = search_cache[key]
        for g in entry.gpus:
            sub = subset_cluster(cl, g)
            for m, _msrc in models:
                for gbs in gbs_list:
                    for seq in seq_list:
                        training = training_for(gbs, seq)
                        for tk in tokens_list:
                            tokens = CHINCHILLA_TOKENS_PER_PARAM * m.num_params() if tk == "chinchilla" else tk
                            content = {"model": m.__dict__, "cluster": cl.name, "cluster_file": cl.source and
                                       os.path.basename(cl.source), "gpus": g, "training": training.__dict__,
                                       "search": _search_id(search), "solver": solver.__dict__, "tokens": tokens,
                                       "price": entry.price_per_gpu_hour_usd}
                            label = f"{m.name}-{cl.name}-{g}g-b{gbs}-s{seq}"
                            cid = _stable_id(label, content)
                            raw = {"name": cid, "model": m.__dict__, "cluster": cl.name, "gpus": g,
                                   "training": training.__dict__, "search": search_data,
                                   "solver": solver.__dict__}
                            try:
                                spec = Spec(name=cid, model=m, cluster=sub, training=training_for(gbs, seq, tokens),
                                            search=search, solver=solver, source=file, raw=raw)
                            except FieldError as e:   # the plan's own rules (fp8 on an A100): name the sweep file
                                raise SpecError(file, e.field, f"{e.reason} (case {label})") from None
                            cases.append(Case(cid, spec, m.name, cl.name, g, tokens, entry.price_per_gpu_hour_usd))
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        raise SpecError(file, None, "the sweep expands to duplicate cases (repeated models, clusters or values)")

    sizing = []
    for entry in entries:
        search = search_cache[id(entry.cluster)]
        for g in entry.gpus:
            for gbs in gbs_list:
                for seq in seq_list:
                    for b in budgets:
                        training = training_for(gbs, seq)
                        content = {"cluster": entry.cluster.name, "gpus": g, "budget": b,
                                   "training": training.__dict__, "search": _search_id(search),
                                   "solver": solver.__dict__, "family": sizing_family, "vocab": sizing_vocab,
                                   **({"shape": sizing_rule.id_part()} if sizing_rule.id_part() else {})}
                        sid = _stable_id(f"size-{entry.cluster.name}-{g}g-{b:g}gpud-b{gbs}-s{seq}", content)
                        sizing.append(SizingTask(sid, subset_cluster(entry.cluster, g), entry.cluster.name, g, b,
                                                 training, search, solver, sizing_family, sizing_vocab, sizing_rule,
                                                 entry.price_per_gpu_hour_usd))
    return Sweep(name, cases, sizing, skipped, file)


def _check_plan_rules(file, entry: ClusterEntry, model: ModelSpec, training: dict, search: dict) -> None:
    """The rules a plan spec checks across its parts (training against search and cluster: fp8_recipe delayed with
    only ZeRO-3, cp_comm, the pipeline engine's schedules and ZeRO stages, dp_shard without ZeRO-3, context
    parallelism against seq_length, ...), checked by reading the sweep's training and search with one of its
    clusters and models as a plan spec: SpecError naming the sweep file and field."""
    if entry.ref is None:
        return
    cluster = os.path.abspath(entry.ref) if isinstance(entry.ref, str) else entry.ref
    parse_spec({"name": "sweep", "model": dict(model.__dict__), "cluster": cluster, "training": training,
                "search": search}, file)
