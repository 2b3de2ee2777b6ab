"""What one torchtitan Llama block keeps for backward under its per-op selective checkpointing, measured on fake
tensors (CPU, nothing allocated): the check of costs/memory.py op_sac_bytes (ZeRO-3 plans' `selective`).

The block is torchtitan's (pytorch/torchtitan @ 9dec370ad26b5f8e9a7333a0e36165018262644b
torchtitan/models/llama/model.py: RMSNorm, wq / wk / wv, RoPE, repeat_kv, SDPA, wo, and w2(silu(w1 x) * w3 x)), built
from plain torch ops at tp = 1, bf16; the checkpoint policy is torchtitan's 'op' policy (parallelize_llama.py
_save_list / _custom_policy: keep the outputs of mm and SDPA, except every second mm). On CPU SDPA dispatches to
_scaled_dot_product_flash_attention_for_cpu (the CUDA build's op is _scaled_dot_product_flash_attention), so that op
is in the save list here too; it returns the same output and fp32 log-sum-exp.

`eager_bytes` counts the bytes the same block's element-wise kernels move when PyTorch runs it eagerly (the check of
costs/compute.py eager_elementwise_bytes, `training.kernels: eager`); there the block follows torchtitan's code to
the op (complex-valued rotary embedding, repeat_kv by expand + reshape) because each op is a kernel to count.
"""
from __future__ import annotations

import gc
from collections import defaultdict

import torch
import torch.nn.functional as F

from planner.profile.memory import LiveBytes

SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention.default,
        torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}


def _policy():
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        key = "recompute_mm" if ctx.is_recompute else "forward_mm"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        keep = func in SAVE and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


def _rms(x, w):
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * w


def _rope(x, cos, sin):
    x1, x2 = x[..., ::2].float(), x[..., 1::2].float()
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2).type_as(x)


def _block(x, p, heads: int, kv_heads: int, cos, sin):
    b, s, h = x.shape
    d = h // heads
    n = _rms(x, p["attn_norm"])
    q = (n @ p["wq"].t()).view(b, s, heads, d)
    k = (n @ p["wk"].t()).view(b, s, kv_heads, d)
    v = (n @ p["wv"].t()).view(b, s, kv_heads, d)
    q, k = _rope(q, cos, sin), _rope(k, cos, sin)
    rep = heads // kv_heads
    k = k.repeat_interleave(rep, dim=2)
    v = v.repeat_interleave(rep, dim=2)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    x = x + o.transpose(1, 2).reshape(b, s, h) @ p["wo"].t()
    n = _rms(x, p["ffn_norm"])
    return x + (F.silu(n @ p["w1"].t()) * (n @ p["w3"].t())) @ p["w2"].t()


def _block_params(hidden: int, heads: int, kv_heads: int, ffn: int) -> dict:
    """A Llama block's bf16 weights, requiring gradients (call inside FakeTensorMode: nothing is allocated)."""
    dt = torch.bfloat16
    d = hidden // heads
    p = {"attn_norm": torch.ones(hidden, dtype=dt), "ffn_norm": torch.ones(hidden, dtype=dt),
         "wq": torch.empty(hidden, hidden, dtype=dt), "wk": torch.empty(kv_heads * d, hidden, dtype=dt),
         "wv": torch.empty(kv_heads * d, hidden, dtype=dt), "wo": torch.empty(hidden, hidden, dtype=dt),
         "w1": torch.empty(ffn, hidden, dtype=dt), "w3": torch.empty(ffn, hidden, dtype=dt),
         "w2": torch.empty(hidden, ffn, dtype=dt)}
    for w in p.values():
        w.requires_grad_()
    return p


def saved_bytes(hidden: int, heads: int, kv_heads: int, ffn: int, seq: int, batch: int = 1) -> float:
    """Bytes one block keeps from its forward to its backward (its output, the next block's input, included), as
    costs.memory.op_sac_bytes counts them: live bytes after the forward less those before it."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.checkpoint import checkpoint
    dt = torch.bfloat16
    d = hidden // heads
    with FakeTensorMode():
        p = _block_params(hidden, heads, kv_heads, ffn)
        ang = torch.empty(seq, 1, d // 2)
        cos, sin = ang.cos(), ang.sin()
        x = torch.empty(batch, seq, hidden, dtype=dt, requires_grad=True)
        tracker = LiveBytes()
        for t in (*p.values(), cos, sin, x):       # what exists before the block (weights are seen through views)
            tracker._add(t)
        with tracker:
            gc.collect()
            before = tracker.live
            out = checkpoint(_block, x, p, heads, kv_heads, cos, sin, use_reentrant=False,
                             context_fn=_policy)
            gc.collect()
            kept = tracker.live - before
        del out
    return float(kept)


def layer_sac_saved_bytes(hidden: int, heads: int, kv_heads: int, ffn: int, seq: int, chunks: tuple[int, ...],
                          every: int, batch: int = 1) -> list[float]:
    """Bytes each model chunk of one pipeline rank keeps from its forward to its backward under torchtitan's
    per-layer selective checkpointing, selective_ac_option = str(every) (a ZeRO-3 plan's `recompute: block`):
    `chunks` holds the rank's chunks' block counts in build order, and one counter runs over all their blocks, as
    pytorch/torchtitan @ 238fa9953e4aec2a62582121564273d7cbb1e9f1 distributed/activation_checkpoint.py
    _apply_layer_sac does (incremented, then a block is wrapped whole in checkpoint_wrapper when counter % every ==
    0, else left alone). The check of ParallelConfig.checkpointed_chunk_layers / costs.memory.chunk_stored_bytes:
    a chunk keeps its checkpointed blocks' inputs (costs.memory's full-recompute layer, 2sbh) and its other blocks'
    saved tensors. The blocks run eagerly here (no torch.compile, no per-op policy), so a stored block's bytes are
    this eager block's, not the estimator's none count (which is the compiled block's): the test compares against
    the profiler's own single-block counts for that kind."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.checkpoint import checkpoint
    dt = torch.bfloat16
    d = hidden // heads
    out = []
    with FakeTensorMode():
        params = [[_block_params(hidden, heads, kv_heads, ffn) for _ in range(n)] for n in chunks]
        ang = torch.empty(seq, 1, d // 2)
        cos, sin = ang.cos(), ang.sin()
        x = torch.empty(batch, seq, hidden, dtype=dt, requires_grad=True)
        tracker = LiveBytes()
        for t in (*[w for c in params for p in c for w in p.values()], cos, sin, x):
            tracker._add(t)
        counter = 0
        held = []
        with tracker:
            for chunk in params:
                gc.collect()
                before = tracker.live
                for p in chunk:
                    counter += 1
                    if counter % every == 0:
                        x = checkpoint(_block, x, p, heads, kv_heads, cos, sin, use_reentrant=False)
                    else:
                        x = _block(x, p, heads, kv_heads, cos, sin)
                    held.append(x)
                gc.collect()
                out.append(float(tracker.live - before))
        del held, x
    return out


# GEMMs and attention are timed by the compute model's GEMM curve and fused-attention efficiency, not as bytes
_NOT_ELEMENTWISE = {"mm", "addmm", "bmm", "_scaled_dot_product_flash_attention",
                    "_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_flash_attention_for_cpu",
                    "_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_efficient_attention",
                    "_scaled_dot_product_efficient_attention_backward",
                    # allocate without touching memory, or alias their input
                    "empty", "empty_like", "empty_strided", "detach", "_unsafe_view"}


def _span_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel touches reading (or writing) `t`: its elements, but a broadcast (stride 0) operand once."""
    if t.numel() == 0:
        return 0
    span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return min(t.numel(), span) * t.element_size()


class _ElementwiseBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """Sum over aten kernels (views, GEMMs and attention left out) of the bytes of their tensor inputs and outputs:
    each kernel reads its operands and writes its results once."""

    def __init__(self):
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace == "aten" and not func.is_view and func._opname not in _NOT_ELEMENTWISE:
            leaves = torch.utils._pytree.tree_leaves((args, kwargs, out))
            self.total += sum(_span_bytes(t) for t in leaves if isinstance(t, torch.Tensor))
        return out


def _eager_rms(x, w):
    # torchtitan's RMSNorm.forward: self._norm(x.float()).type_as(x) * self.weight
    def norm(y):
        return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5)
    return norm(x.float()).type_as(x) * w


def _eager_rope(xq, xk, freqs_cis):
    # torchtitan's apply_rotary_emb (complex64) with reshape_for_broadcast
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    return (torch.view_as_real(xq_ * fc).flatten(3).type_as(xq), torch.view_as_real(xk_ * fc).flatten(3).type_as(xk))


def _repeat_kv(x, n: int):
    b, s, k, d = x.shape
    return x if n == 1 else x.unsqueeze(3).expand(b, s, k, n, d).reshape(b, s, k * n, d)


def _eager_block(x, p, heads: int, kv_heads: int, freqs_cis):
    b, s, h = x.shape
    d = h // heads
    n = _eager_rms(x, p["attn_norm"])
    q = (n @ p["wq"].t()).view(b, s, -1, d)
    k = (n @ p["wk"].t()).view(b, s, -1, d)
    v = (n @ p["wv"].t()).view(b, s, -1, d)
    q, k = _eager_rope(q, k, freqs_cis)
    k, v = _repeat_kv(k, heads // kv_heads), _repeat_kv(v, heads // kv_heads)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    x = x + o.transpose(1, 2).contiguous().view(b, s, -1) @ p["wo"].t()
    n = _eager_rms(x, p["ffn_norm"])
    return x + (F.silu(n @ p["w1"].t()) * (n @ p["w3"].t())) @ p["w2"].t()


def eager_bytes(hidden: int, heads: int, kv_heads: int, ffn: int, seq: int, batch: int = 1) -> tuple[int, int]:
    """(forward, backward) bytes moved by the element-wise kernels of one torchtitan Llama block run eagerly in bf16
    (FSDP2's bf16 parameters), counted by dispatching its aten ops on fake tensors (CPU, nothing allocated)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    dt = torch.bfloat16
    d = hidden // heads
    with FakeTensorMode():
        p = _block_params(hidden, heads, kv_heads, ffn)
        freqs_cis = torch.empty(seq, d // 2, dtype=torch.complex64)
        x = torch.empty(batch, seq, hidden, dtype=dt, requires_grad=True)
        fwd, bwd = _ElementwiseBytes(), _ElementwiseBytes()
        with fwd:
            y = _eager_block(x, p, heads, kv_heads, freqs_cis)
        grad = torch.empty_like(y)
        with bwd:
            y.backward(grad)
    return fwd.total, bwd.total
