"""What one torchtitan Llama block keeps for backward under its per-op selective checkpointing, measured on fake
tensors (CPU, nothing allocated): the check of costs/memory.py op_sac_bytes (ZeRO-3 plans' `selective`).

The block is torchtitan's (pytorch/torchtitan @ 9dec370ad26b5f8e9a7333a0e36165018262644b
torchtitan/models/llama/model.py: RMSNorm, wq / wk / wv, RoPE, repeat_kv, SDPA, wo, and w2(silu(w1 x) * w3 x)), built
from plain torch ops at tp = 1, bf16; the checkpoint policy is torchtitan's 'op' policy (parallelize_llama.py
_save_list / _custom_policy: keep the outputs of mm and SDPA, except every second mm). On CPU SDPA dispatches to
_scaled_dot_product_flash_attention_for_cpu (the CUDA build's op is _scaled_dot_product_flash_attention), so that op
is in the save list here too; it returns the same output and fp32 log-sum-exp.
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


def saved_bytes(hidden: int, heads: int, kv_heads: int, ffn: int, seq: int, batch: int = 1) -> float:
    """Bytes one block keeps from its forward to its backward (its output, the next block's input, included), as
    costs.memory.op_sac_bytes counts them: live bytes after the forward less those before it."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.checkpoint import checkpoint
    dt = torch.bfloat16
    d = hidden // heads
    with FakeTensorMode():
        p = {"attn_norm": torch.ones(hidden, dtype=dt), "ffn_norm": torch.ones(hidden, dtype=dt),
             "wq": torch.empty(hidden, hidden, dtype=dt), "wk": torch.empty(kv_heads * d, hidden, dtype=dt),
             "wv": torch.empty(kv_heads * d, hidden, dtype=dt), "wo": torch.empty(hidden, hidden, dtype=dt),
             "w1": torch.empty(ffn, hidden, dtype=dt), "w3": torch.empty(ffn, hidden, dtype=dt),
             "w2": torch.empty(hidden, ffn, dtype=dt)}
        for w in p.values():
            w.requires_grad_()
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
