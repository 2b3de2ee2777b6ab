"""Memory profiler: run one pipeline stage of a Megatron-style GPT / Llama in PyTorch and measure its peak.

The stage is built with the per-GPU shapes of tensor parallel (column / row sharded GEMMs, vocab-parallel
embedding and cross entropy) and sequence parallel (LayerNorm / dropout regions on s/t tokens, all-gather
before and reduce-scatter after each GEMM pair, sharded GEMM inputs saved for backward and re-gathered, as
Megatron's LinearWithGradAccumulationAndAsyncCommunication does). Collectives are emulated in one process
with exactly the buffers they allocate (all-gather: t x input; reduce-scatter: input / t; all-reduce: in
place), so memory is right although no data moves. Parameters live in one flat 16-bit buffer, gradients
are accumulated into an fp32 `main_grad` buffer (Megatron's DDP grad buffer; ZeRO-2 keeps only this rank's
shard), and a mixed-precision Adam step runs on fp32 master weights (sharded over data parallel for ZeRO>=1).

The schedule's in-flight pattern: the stage runs forward on as many micro-batches (chunk-micro-batches for
interleaved / V-shape) as the schedule keeps alive at its peak (planner.schedules.inflight_microbatches),
keeping their activations, then runs backward on them, then the optimizer step.

Peak memory: with CUDA, torch.cuda.max_memory_allocated / max_memory_reserved. Without a GPU the same code
runs under FakeTensorMode (nothing is allocated, nothing computed) and a TorchDispatchMode counts the bytes
of live tensor storages (freed when the storage is garbage-collected), which is what the caching allocator's
`allocated` counter sees, minus its 512-byte rounding. Fake runs cannot see CUDA context, cuBLAS workspaces,
NCCL buffers or fragmentation: those are the estimator's `overhead` and `fragmentation` terms (measured on an
H100, docs/notes/memory.md). Kernel temporaries that only CUDA allocates are emulated where measured (_Softmax).

Layers: memory is linear in the number of layers a stage holds (each layer adds the same parameters,
gradients, optimizer state and saved activations; transients of one layer's backward do not grow with the
layer count), so samples use 1-3 layers per chunk; the features are computed for that reduced model and the
estimator, being a function of the features, transfers to the full layer count.
"""
from __future__ import annotations

import csv
import math
import random
import time
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from planner.config import ParallelConfig
from planner.costs.memory import chunk_order, held_forwards, output_chunk, padded_vocab
from planner.costs.pipeline import chunks_per_device

# ----------------------------------------------------------------------------------------------------------
# Live-storage tracking (CPU, fake tensors)


class LiveBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts bytes of live tensor storages created under it; a storage is freed when it is collected."""

    def __init__(self):
        super().__init__()
        from torch.utils.weak import WeakIdKeyDictionary
        self.live = 0
        self.peak = 0
        self._seen = WeakIdKeyDictionary()
        self._refs = []

    def _add(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        if st in self._seen:
            return
        n = st.nbytes()
        self._seen[st] = n
        self.live += n
        if self.live > self.peak:
            self.peak = self.live

        def freed(_, n=n, self_ref=weakref.ref(self)):  # noqa: B008 (bound now: the tracker, weakly)
            s = self_ref()
            if s is not None:
                s.live -= n
        self._refs.append(weakref.ref(st, freed))

    def reset_peak(self) -> None:
        self.peak = self.live

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._add(t)
        return out


# ----------------------------------------------------------------------------------------------------------
# Tensor/sequence-parallel collectives, emulated with the buffers they allocate


def _gather(x: torch.Tensor, t: int) -> torch.Tensor:
    """All-gather along the sequence dim: a new t-times larger buffer."""
    return torch.cat([x] * t, dim=0) if t > 1 else x


def _scatter(x: torch.Tensor, t: int) -> torch.Tensor:
    """Reduce-scatter along the sequence dim: a new 1/t buffer (the input is freed by the caller)."""
    return x[: x.shape[0] // t].clone() if t > 1 else x


def _dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """CUDA's fused dropout (1-byte bool mask saved); F.dropout on CPU would save a full-width mask."""
    return torch.native_dropout(x, p, True)[0]


class _Softmax(torch.autograd.Function):
    """torch.softmax over the last dim. On CUDA its backward kernel (_softmax_backward_data) holds a temporary
    as large as its input besides its output (measured on an H100, torch 2.11: benchmarks/memory_cuda_probe.py);
    fake and CPU kernels do not, so elsewhere the temporary is allocated here, for the kernel's duration."""

    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, dim=-1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        scratch = torch.empty_like(g) if g.device.type != "cuda" else None
        gx = torch._softmax_backward_data(g, y, -1, y.dtype)
        del scratch
        return gx


class _ColumnLinear(torch.autograd.Function):
    """Column-parallel GEMM; with SP it gathers its s/t input and saves only the shard (re-gathers in backward).
    The weight gradient goes straight into fp32 main_grad (gradient-accumulation fusion), never to .grad."""

    @staticmethod
    def forward(ctx, x, w, t, sp, sink):
        total = _gather(x, t) if sp else x
        ctx.save_for_backward(x, w)
        ctx.t, ctx.sp, ctx.sink = t, sp, sink
        return torch.matmul(total, w.t())

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        total = _gather(x, ctx.t) if ctx.sp else x
        gi = torch.matmul(g, w)
        ctx.sink(torch.matmul(g.reshape(-1, g.shape[-1]).t(), total.reshape(-1, total.shape[-1])))
        del total
        if ctx.sp:
            gi = _scatter(gi, ctx.t)
        return gi, None, None, None, None


class _RowLinear(torch.autograd.Function):
    """Row-parallel GEMM followed by all-reduce (in place) or, with SP, reduce-scatter to s/t."""

    @staticmethod
    def forward(ctx, x, w, t, sp, sink):
        ctx.save_for_backward(x, w)
        ctx.t, ctx.sp, ctx.sink = t, sp, sink
        out = torch.matmul(x, w.t())
        return _scatter(out, t) if sp else out

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        if ctx.sp:
            g = _gather(g, ctx.t)
        gi = torch.matmul(g, w)
        ctx.sink(torch.matmul(g.reshape(-1, g.shape[-1]).t(), x.reshape(-1, x.shape[-1])))
        return gi, None, None, None, None


class _RMSNorm(torch.autograd.Function):
    """Fused RMSNorm (apex / Transformer Engine): saves the 16-bit input and the fp32 rstd only. (The CPU
    composite F.rms_norm would save fp32 copies, which no GPU kernel does.)"""

    @staticmethod
    def forward(ctx, x, w, eps):
        rstd = torch.rsqrt(x.to(torch.promote_types(x.dtype, torch.float32)).pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, w, rstd)
        return (x * rstd).to(x.dtype) * w

    @staticmethod
    def backward(ctx, g):
        # in-place chains so that, like the fused kernel, little beyond grad_input is allocated
        x, w, rstd = ctx.saved_tensors
        gw = torch.sum((g * x).mul_(rstd.to(x.dtype)).reshape(-1, x.shape[-1]), 0)
        gx = g * w
        c = torch.sum(gx * x, -1, keepdim=True, dtype=rstd.dtype).div_(x.shape[-1]).mul_(rstd).mul_(rstd)
        gx.sub_(x * c.to(x.dtype)).mul_(rstd.to(x.dtype))
        return gx, gw.to(w.dtype), None


class _SwiGLU(torch.autograd.Function):
    """Megatron's fused bias-SwiGLU: saves only the fc1 output [gate, up], recomputes silu in backward."""

    @staticmethod
    def forward(ctx, y):
        ctx.save_for_backward(y)
        a, b = y.chunk(2, dim=-1)
        return F.silu(a) * b

    @staticmethod
    def backward(ctx, g):
        # d/da silu(a)*b = b*sig*(1 + a(1-sig)), d/db = silu(a); in-place chains as a fused kernel would
        (y,) = ctx.saved_tensors
        a, b = y.chunk(2, dim=-1)
        sig = torch.sigmoid(a)
        ga = torch.sub(1, sig).mul_(a).add_(1).mul_(sig).mul_(b).mul_(g)
        gb = sig.mul_(a).mul_(g)
        return torch.cat([ga, gb], dim=-1)


class _VocabParallelCE(torch.autograd.Function):
    """Megatron's vocab-parallel cross entropy: fp32 copy of the logits shard, saves the softmax (in place)."""

    @staticmethod
    def forward(ctx, logits, target):
        x = logits.float()
        x.sub_(x.max(dim=-1, keepdim=True)[0])
        x.exp_()
        denom = x.sum(dim=-1, keepdim=True)
        x.div_(denom)
        picked = x.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        ctx.save_for_backward(x, target)
        ctx.dtype = logits.dtype
        return -torch.log(picked).mean()

    @staticmethod
    def backward(ctx, g):
        x, target = ctx.saved_tensors
        x.scatter_add_(-1, target.unsqueeze(-1), -torch.ones_like(target, dtype=x.dtype).unsqueeze(-1))
        x.mul_(g / target.numel())
        return x.to(ctx.dtype), None


# ----------------------------------------------------------------------------------------------------------
# Parameters: one flat 16-bit buffer, one fp32 main-grad buffer (or ZeRO-2 shard), fp32 master + Adam


class ParamStore:
    def __init__(self, dtype, dp: int, zero: int, master: bool, device):
        self.dtype, self.dp, self.zero, self.master, self.device = dtype, dp, zero, master, device
        self.shapes: list[tuple[str, tuple]] = []

    def declare(self, name: str, *shape: int) -> str:
        self.shapes.append((name, tuple(shape)))
        return name

    def build(self):
        sizes = [math.prod(s) for _, s in self.shapes]
        self.numel = sum(sizes)
        self.flat = torch.empty(self.numel, dtype=self.dtype, device=self.device)
        # ZeRO-2 keeps only this rank's 1/dp of every gradient (reduce-scattered as it is produced)
        gsizes = [math.ceil(n / self.dp) for n in sizes] if self.zero >= 2 else sizes
        self.grad = torch.zeros(sum(gsizes), dtype=torch.float32, device=self.device)
        self.params, self.main_grads = {}, {}
        off = goff = 0
        for (name, shape), n, gn in zip(self.shapes, sizes, gsizes):
            self.params[name] = self.flat[off:off + n].view(shape)
            self.main_grads[name] = self.grad[goff:goff + gn]
            off += n
            goff += gn
        shard = math.ceil(self.numel / self.dp) if self.zero >= 1 else self.numel
        if self.master:
            self.opt_param = torch.nn.Parameter(torch.empty(shard, dtype=torch.float32, device=self.device))
        else:   # fp32 training: the optimizer works on (its shard of) the parameters themselves
            self.opt_param = torch.nn.Parameter(self.flat[:shard])
        self.opt_grad = self.grad[:min(shard, self.grad.numel())]

    def sink(self, name: str):
        mg = self.main_grads[name]

        def add(gw: torch.Tensor) -> None:
            mg.add_(gw.reshape(-1)[: mg.numel()])
        return add

    def leaf(self, name: str) -> torch.Tensor:
        """A parameter that goes through ordinary autograd (norms, biases, embeddings): its 16-bit .grad is
        added to main_grad by a post-accumulate hook and dropped, as Megatron's DDP hooks do."""
        p = self.params[name].detach().requires_grad_()
        add = self.sink(name)

        def hook(q):
            add(q.grad)
            q.grad = None
        p.register_post_accumulate_grad_hook(hook)
        return p


def _opt_step(store: ParamStore, opt) -> None:
    store.opt_param.grad = store.opt_grad
    opt.step()
    store.opt_param.grad = None
    if store.master:  # new 16-bit weights from this rank's master shard (then all-gathered in place)
        store.flat[: store.opt_param.numel()].copy_(store.opt_param.detach())


# ----------------------------------------------------------------------------------------------------------
# The stage


@dataclass(frozen=True)
class StageShape:
    """What one GPU of one stage holds: per-chunk layer counts and whether it has the embedding / output."""
    chunks: int
    layers_per_chunk: int
    embedding_chunk: int | None      # chunk index that starts with the embedding, None if none
    output_chunk: int | None         # chunk index that ends with the output layer + loss


def stage_shape(cfg: ParallelConfig, stage: int, layers_per_chunk: int) -> StageShape:
    emb = 0 if stage == 0 else None
    return StageShape(chunks_per_device(cfg.schedule, cfg.vpp), layers_per_chunk, emb, output_chunk(cfg, stage))


def _dims(model, cfg):
    t = cfg.tp
    vocab = padded_vocab(model, t)                                  # Megatron pads the vocab to 128*tp
    return {"t": t, "h": model.hidden_size, "a": model.num_attention_heads // t, "g": model.num_kv_heads // t,
                "d": model.head_dim, "f": model.ffn_hidden_size // t, "v": vocab // t}


class Stage:
    def __init__(self, model, training, cfg: ParallelConfig, stage: int, shape: StageShape, device):
        self.model, self.training, self.cfg, self.shape, self.device = model, training, cfg, shape, device
        if getattr(training, "attention", "unfused") != "unfused":
            # only the explicit softmax path is built; a fused case measured here would be labelled wrongly
            raise ValueError("the memory profiler runs unfused attention only (training.attention: unfused)")
        half = training.precision in ("bf16", "fp16")
        self.dtype = torch.bfloat16 if training.precision == "bf16" else (torch.float16 if half else torch.float32)
        self.gpt = model.family == "gpt"
        self.p_drop = 0.1 if self.gpt else 0.0     # GPT-3 / Megatron GPT trains with dropout; Llama without
        D = _dims(model, cfg)
        self.D = D
        st = self.store = ParamStore(self.dtype, cfg.dp, cfg.zero, half, device)
        h, f, d = D["h"], D["f"], D["d"]
        qkv = (D["a"] + 2 * D["g"]) * d
        self.layer_names = []
        for c in range(shape.chunks):
            for i in range(shape.layers_per_chunk):
                p = f"c{c}l{i}."
                st.declare(p + "n1w", h)
                st.declare(p + "qkv", qkv, h)
                st.declare(p + "proj", h, D["a"] * d)
                st.declare(p + "n2w", h)
                st.declare(p + "fc1", f * (2 if not self.gpt else 1), h)
                st.declare(p + "fc2", h, f)
                if self.gpt:
                    for n, k in (("n1b", h), ("qkvb", qkv), ("projb", h), ("n2b", h), ("fc1b", f), ("fc2b", h)):
                        st.declare(p + n, k)
                self.layer_names.append(p)
        if shape.embedding_chunk is not None:
            st.declare("wemb", D["v"], h)
            if self.gpt:
                st.declare("pemb", model.max_position_embeddings, h)
        if shape.output_chunk is not None:
            st.declare("fnw", h)
            if self.gpt:
                st.declare("fnb", h)
            # untied: the output layer; tied with pp>1: Megatron's copy of the word embedding on the last stage
            if not (model.tied_embeddings and shape.embedding_chunk is not None):
                st.declare("wout", D["v"], h)
        st.build()
        self.leaves = {n: st.leaf(n) for n, _ in st.shapes
                       if n.endswith(("n1w", "n2w", "n1b", "n2b", "qkvb", "projb", "fc1b", "fc2b", "fnw", "fnb",
                                      "wemb", "pemb"))}
        s = training.seq_length
        self.causal = torch.ones(s, s, dtype=torch.bool, device=device).triu_(1)
        if not self.gpt:
            self.cos = torch.empty(s, 1, 1, d, dtype=self.dtype, device=device)
            self.sin = torch.empty(s, 1, 1, d, dtype=self.dtype, device=device)
        lr = 1e-4
        if training.optimizer == "sgd":
            self.opt = torch.optim.SGD([st.opt_param], lr=lr, momentum=0.9)
        else:
            # fused (multi-tensor, no full-size temporaries), as Megatron's apex / TE FusedAdam
            self.opt = torch.optim.Adam([st.opt_param], lr=lr, fused=True)

    # -- pieces ----------------------------------------------------------------------------------------------
    def _norm(self, x, p, w, b):
        if self.gpt:
            return F.layer_norm(x, (x.shape[-1],), self.leaves[p + w], self.leaves[p + b])
        return _RMSNorm.apply(x, self.leaves[p + w], 1e-5)

    def _col(self, x, name):
        return _ColumnLinear.apply(x, self.store.params[name], self.D["t"], self._sp, self.store.sink(name))

    def _row(self, x, name):
        return _RowLinear.apply(x, self.store.params[name], self.D["t"], self._sp, self.store.sink(name))

    @property
    def _sp(self):
        return self.cfg.sequence_parallel and self.D["t"] > 1

    def _core_attention(self, q, k, v):
        s, b = q.shape[0], q.shape[1]
        a, d = self.D["a"], self.D["d"]
        q = q.reshape(s, b * a, d).transpose(0, 1)
        k = k.reshape(s, b * a, d).transpose(0, 1)
        v = v.reshape(s, b * a, d).transpose(0, 1)
        buf = torch.empty(b * a, s, s, dtype=q.dtype, device=q.device)
        scores = torch.baddbmm(buf, q, k.transpose(1, 2), beta=0.0, alpha=1.0 / math.sqrt(d))
        del buf
        scores = scores.masked_fill(self.causal, -10000.0)
        probs = _Softmax.apply(scores)
        del scores
        if self.p_drop:
            probs = _dropout(probs, self.p_drop)
        ctx = torch.bmm(probs, v)                                    # [b*a, s, d]
        return ctx.transpose(0, 1).reshape(s, b, a * d)

    def _layer(self, x, p):
        D = self.D
        s_full = self.training.seq_length
        a, g, d = D["a"], D["g"], D["d"]
        residual = x
        y = self._norm(x, p, "n1w", "n1b")
        qkv = self._col(y, p + "qkv")
        del y
        if self.gpt:
            qkv = qkv + self.leaves[p + "qkvb"]
        b = qkv.shape[1]
        qkv = qkv.view(s_full, b, g, (a // g + 2) * d)
        q, k, v = torch.split(qkv, [a // g * d, d, d], dim=-1)
        q = q.reshape(s_full, b, a, d)
        k = k.reshape(s_full, b, g, d)
        v = v.reshape(s_full, b, g, d)
        del qkv
        if not self.gpt:   # RoPE on q and k (unfused: t*cos + rotate_half(t)*sin)
            q = q * self.cos + torch.cat([-q[..., d // 2:], q[..., : d // 2]], dim=-1) * self.sin
            k = k * self.cos + torch.cat([-k[..., d // 2:], k[..., : d // 2]], dim=-1) * self.sin
        if g != a:         # grouped-query attention: expand K and V to all heads (Megatron's local path)
            k = k.repeat_interleave(a // g, dim=2)
            v = v.repeat_interleave(a // g, dim=2)
        if self.cfg.recompute == "selective":
            ctx = torch.utils.checkpoint.checkpoint(self._core_attention, q, k, v, use_reentrant=False,
                                                    preserve_rng_state=False)
        else:
            ctx = self._core_attention(q, k, v)
        del q, k, v
        out = self._row(ctx, p + "proj")
        del ctx
        if self.gpt:
            out = out + self.leaves[p + "projb"]
        if self.p_drop:
            out = _dropout(out, self.p_drop)
        x = residual + out
        del out, residual
        residual = x
        if self.cfg.recompute == "mlp":     # Megatron-Core's mlp module: checkpointed from its input (TE: the norm's)
            y = torch.utils.checkpoint.checkpoint(self._mlp, x, p, use_reentrant=False, preserve_rng_state=False)
        else:
            y = self._mlp(x, p)
        if self.p_drop:
            y = _dropout(y, self.p_drop)
        return residual + y

    def _mlp(self, x, p):
        """The pre-MLP norm, fc1, the activation and fc2 (+ biases): Megatron-Core's MLP module with Transformer
        Engine's norm fused into fc1; the hidden dropout and the residual add are outside it (mlp_bda)."""
        y = self._norm(x, p, "n2w", "n2b")
        y = self._col(y, p + "fc1")
        if self.gpt:
            y = F.gelu(y + self.leaves[p + "fc1b"])
        else:
            y = _SwiGLU.apply(y)
        y = self._row(y, p + "fc2")
        if self.gpt:
            y = y + self.leaves[p + "fc2b"]
        return y

    def _embed(self, ids):
        w = self.leaves["wemb"]
        x = F.embedding(ids.clamp(0, w.shape[0] - 1), w)           # [b, s, h]; vocab-parallel lookup
        if self.gpt:
            x = x + self.leaves["pemb"][: ids.shape[1]].unsqueeze(0)
        x = x.transpose(0, 1).contiguous()                         # [s, b, h]; all-reduce in place
        if self._sp:
            x = _scatter(x, self.D["t"])
        if self.p_drop:
            x = _dropout(x, self.p_drop)
        return x

    def _head(self, x, labels):
        x = self._norm(x, "", "fnw", "fnb")
        # tied on a single stage: the word embedding itself, its weight gradient fused into main_grad as well
        logits = self._col(x, "wout" if "wout" in self.store.params else "wemb")
        return _VocabParallelCE.apply(logits, labels.t())

    def chunk_forward(self, c: int, x, ids, labels):
        sh = self.shape
        if sh.embedding_chunk == c:
            x = self._embed(ids)
        # full: every layer checkpointed; block: the first N of each chunk (Megatron-Core recompute.py, per
        # TransformerBlock, i.e. per virtual stage)
        rc_layers = {"full": sh.layers_per_chunk, "block": self.cfg.recompute_layers or 0}.get(self.cfg.recompute, 0)
        for i in range(sh.layers_per_chunk):
            p = f"c{c}l{i}."
            if i < rc_layers:
                x = torch.utils.checkpoint.checkpoint(self._layer, x, p, use_reentrant=False,
                                                      preserve_rng_state=False)
            else:
                x = self._layer(x, p)
        if sh.output_chunk == c:
            return self._head(x, labels), True
        return x, False


@dataclass(frozen=True)
class Measurement:
    peak_allocated: float        # bytes: fake-tensor live-storage peak, or torch.cuda.max_memory_allocated
    peak_reserved: float         # bytes: CUDA caching allocator reserved peak; = allocated on fake runs
    static: float                # bytes live before the iteration: weights + grads + optimizer (+ buffers)
    after_forward: float         # bytes live once all held forwards are done (static + activations + inputs)
    held_forwards: int           # chunk-micro-batch forwards held at the peak
    seconds: float
    backend: str                 # "fake-cpu" or "cuda"
    peak_requested: float = 0.0  # bytes the program asked for at the allocated peak's high-water mark (CUDA:
    #                              the allocator's requested_bytes peak, before its 512-byte rounding and
    #                              unsplit block remainders; fake: = peak_allocated)


def measure_stage(model, training, cfg: ParallelConfig, stage: int, layers_per_chunk: int,
                  device: str = "fake") -> Measurement:
    """Build the stage, run its in-flight micro-batch pattern and an optimizer step, return the peak."""
    t0 = time.perf_counter()
    if device == "cuda":
        return _run_cuda(model, training, cfg, stage, layers_per_chunk, t0)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=False):
        tracker = LiveBytes()
        with tracker:
            r = _run(model, training, cfg, stage, layers_per_chunk, "cpu", tracker.reset_peak, lambda: tracker.live)
        peak = tracker.peak
    return Measurement(float(peak), float(peak), float(r[0]), float(r[2]), r[1], time.perf_counter() - t0,
                       "fake-cpu", float(peak))


def _run_cuda(model, training, cfg, stage, layers_per_chunk, t0) -> Measurement:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    r = _run(model, training, cfg, stage, layers_per_chunk, "cuda",
             torch.cuda.reset_peak_memory_stats, torch.cuda.memory_allocated)
    torch.cuda.synchronize()
    requested = torch.cuda.memory_stats().get("requested_bytes.all.peak", 0)
    return Measurement(float(torch.cuda.max_memory_allocated()), float(torch.cuda.max_memory_reserved()),
                       float(r[0]), float(r[2]), r[1], time.perf_counter() - t0, "cuda", float(requested))


def _run(model, training, cfg, stage, layers_per_chunk, device, reset_peak, live):
    shape = stage_shape(cfg, stage, layers_per_chunk)
    st = Stage(model, training, cfg, stage, shape, device)
    # steady state: optimizer state exists before the iteration (as after the first step)
    _opt_step(st.store, st.opt)
    st.store.grad.zero_()
    static = live()
    reset_peak()
    s, b, h, t = training.seq_length, cfg.micro_batch_size, model.hidden_size, cfg.tp
    s_local = s // t if st._sp else s
    held = held_forwards(cfg, stage)
    order = chunk_order(cfg, held)
    pending = []
    for c in order:
        ids = labels = x_in = None
        if shape.embedding_chunk == c:
            ids = torch.zeros(b, s, dtype=torch.long, device=device)
        else:      # received from the previous stage: kept for backward
            x_in = torch.empty(s_local, b, h, dtype=st.dtype, device=device).requires_grad_()
        if shape.output_chunk == c:
            labels = torch.zeros(b, s, dtype=torch.long, device=device)
        out, is_loss = st.chunk_forward(c, x_in, ids, labels)
        if not is_loss:  # sent on; Megatron frees the output's data and keeps only its grad_fn
            out.data = torch.empty(0, dtype=out.dtype, device=device)
        pending.append((out, is_loss, x_in))
        del out, x_in, ids, labels
    after_forward = live()
    while pending:   # newest first; each input's gradient is sent back and freed with it
        out, is_loss, x_in = pending.pop()
        if is_loss:
            out.backward()
        else:
            g = torch.empty(s_local, b, h, dtype=st.dtype, device=device)   # received gradient
            # Megatron's custom_backward: the output's data was freed, so skip autograd's shape check
            torch.autograd.Variable._execution_engine.run_backward(
                (out,), (g,), False, False, (), allow_unreachable=True, accumulate_grad=True)
            del g
        del out, x_in
    _opt_step(st.store, st.opt)
    return static, held, after_forward


# ----------------------------------------------------------------------------------------------------------
# Sampling configurations and writing CSV samples

COLUMNS = ("model", "family", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size",
           "vocab_size", "tied_embeddings", "max_position_embeddings", "global_batch_size", "seq_length",
           "precision", "optimizer", "tp", "pp", "dp", "micro_batch_size", "num_microbatches", "schedule", "vpp",
           "recompute", "zero", "sequence_parallel", "stage", "layers_per_chunk", "num_gpus", "held_forwards",
           "weights", "gradients", "optimizer_state", "activations", "logits", "transient",
           "peak_allocated", "peak_reserved", "static", "after_forward", "backend", "seconds", "peak_requested",
           "attention")

_HIDDEN = (1024, 2048, 4096, 5120, 6144, 8192, 12288)
_VOCAB = (32000, 50257, 51200, 128256)


def sample_case(rng: random.Random, max_gpus: int = 512, max_held: int = 48):
    """One random valid (model, training, cfg, stage, layers_per_chunk); per-GPU shapes are realistic (fake
    tensors make shape size free), layer counts are reduced (memory is linear in them)."""
    from planner.spec.model import ModelSpec, _llama_ffn
    from planner.spec.plan import TrainingSpec
    while True:
        fam = rng.choice(("gpt", "llama"))
        h = rng.choice(_HIDDEN)
        heads = h // 128
        kv = heads if fam == "gpt" or rng.random() < 0.4 else 8
        f = 4 * h if fam == "gpt" else _llama_ffn(h)
        tp = rng.choice((1, 2, 4, 8))
        if kv % tp or heads % tp or f % tp:
            continue
        pp = rng.choice((1, 2, 4, 8, 16, 32, 64))
        dp = rng.choice((1, 2, 4, 8, 16, 32, 64))
        gpus = tp * pp * dp
        if gpus > max_gpus:
            continue
        schedules = ["1f1b", "gpipe"] + (["interleaved", "zb-h1", "v-half", "v-min", "v-zb"] if pp > 1 else [])
        sched = rng.choice(schedules)
        vpp = rng.choice((2, 4)) if sched == "interleaved" else (2 if sched.startswith("v-") else 1)
        m = pp * rng.choice((1, 2, 4)) if pp > 1 else rng.choice((1, 2, 4, 8))
        if sched == "interleaved" and m % pp:
            continue
        cfg = ParallelConfig(tp, pp, dp, rng.choice((1, 2, 4, 8)), m, sched, vpp,
                             rng.choice(("none", "selective", "full")), rng.choice((0, 1, 2)),
                             tp > 1 and rng.random() < 0.6)
        stage = rng.choice(sorted({0, pp - 1, rng.randrange(pp)}))
        if held_forwards(cfg, stage) > max_held:
            continue
        lpc = rng.choice((1, 2, 3))
        layers = pp * chunks_per_device(sched, vpp) * lpc
        vocab = rng.choice(_VOCAB)
        seq = rng.choice((512, 1024, 2048, 4096))
        model = ModelSpec(name=f"{fam}-h{h}", family=fam, num_layers=layers, hidden_size=h, num_attention_heads=heads,
                          num_kv_heads=kv, ffn_hidden_size=f, vocab_size=vocab,
                          tied_embeddings=fam == "gpt" and rng.random() < 0.7, max_position_embeddings=max(2048, seq))
        if cfg.sequence_parallel and seq % tp:
            continue
        # the profiled layer runs Megatron's explicit softmax path (Stage._core_attention) and accumulates into an
        # fp32 main_grad (grad_reduce_in_fp32)
        training = TrainingSpec(global_batch_size=cfg.global_batch_size, seq_length=seq,
                                precision=rng.choice(("bf16", "bf16", "fp16")), optimizer="adam", attention="unfused",
                                grad_reduce_in_fp32=True)
        return model, training, cfg, stage, lpc


def sample_row(model, training, cfg: ParallelConfig, stage: int, lpc: int, device: str = "fake") -> dict:
    from planner.costs.memory import AnalyticalMemory
    a = AnalyticalMemory().stage_memory(model, None, training, cfg, stage)
    r = measure_stage(model, training, cfg, stage, lpc, device)
    row = {"model": model.name, "family": model.family, "num_layers": model.num_layers,
           "hidden_size": model.hidden_size, "num_attention_heads": model.num_attention_heads,
           "num_kv_heads": model.num_kv_heads, "ffn_hidden_size": model.ffn_hidden_size,
           "vocab_size": model.vocab_size, "tied_embeddings": model.tied_embeddings,
           "max_position_embeddings": model.max_position_embeddings,
           "global_batch_size": training.global_batch_size, "seq_length": training.seq_length,
           "precision": training.precision, "optimizer": training.optimizer, "attention": training.attention}
    row.update(cfg.as_dict())
    row.update({"stage": stage, "layers_per_chunk": lpc, "num_gpus": cfg.num_gpus, "held_forwards": r.held_forwards,
                "weights": a.weights, "gradients": a.gradients, "optimizer_state": a.optimizer,
                "activations": a.activations, "logits": a.logits, "transient": a.transient,
                "peak_allocated": r.peak_allocated, "peak_reserved": r.peak_reserved, "static": r.static,
                "after_forward": r.after_forward, "backend": r.backend, "seconds": round(r.seconds, 3),
                "peak_requested": r.peak_requested})
    return row


def stage_peak_estimate(model, training, cfg: ParallelConfig, stage: int, lpc: int) -> float:
    """Analytical allocated peak (bytes, runtime overhead excluded) of a sampled case, to screen what a GPU holds."""
    from planner.costs.memory import AnalyticalMemory
    a = AnalyticalMemory(overhead_GiB=0.0).stage_memory(model, None, training, cfg, stage)
    return a.total


def runtime_overhead_bytes() -> float:
    """Device memory this process holds outside PyTorch's caching allocator: CUDA context, kernel images,
    cuBLAS/cuDNN handles (what the estimator's overhead term stands for, NCCL buffers aside)."""
    free, total = torch.cuda.mem_get_info()
    return float(total - free - torch.cuda.memory_reserved())


def write_samples(path: str, rows: list[dict]) -> None:
    import io

    from planner.io import atomic_write_text
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS)
    w.writeheader()
    for r in rows:
        w.writerow(r)
    atomic_write_text(path, buf.getvalue())
