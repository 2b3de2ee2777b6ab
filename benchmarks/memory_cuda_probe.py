"""What a CUDA process holds beyond the tensors a training step allocates (run on a GPU machine).

Prints JSON: the CUDA context and kernel images (device memory in use outside PyTorch's caching
allocator), and the allocator bytes that appear on the first GEMM forward and on the first backward
(cuBLAS / cuBLASLt workspaces; backward runs on autograd's own device thread, with its own handle).
Run: python benchmarks/memory_cuda_probe.py
"""
from __future__ import annotations

import json

import torch

MiB = 1024 ** 2


def outside_allocator() -> float:
    free, total = torch.cuda.mem_get_info()
    return (total - free - torch.cuda.memory_reserved()) / MiB




class OpMemory(torch.utils._python_dispatch.TorchDispatchMode):
    """Per aten op: bytes the op held at its peak beyond what was live before and what it returned
    (kernel-internal temporaries that a fake-tensor run cannot see)."""

    def __init__(self):
        super().__init__()
        self.rows = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = func(*args, **(kwargs or {}))
        torch.cuda.synchronize()
        outs = [t for t in torch.utils._pytree.tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        new = sum(t.untyped_storage().nbytes() for t in outs if t.untyped_storage().nbytes()
                  and not any(t.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
                              for a in torch.utils._pytree.tree_flatten((args, kwargs))[0]
                              if isinstance(a, torch.Tensor)))
        self.rows.append((str(func), (torch.cuda.max_memory_allocated() - before - new) / MiB, new / MiB))
        return out


def _attention(q, k, v, mask, dropout: bool):
    buf = torch.empty(q.shape[0], q.shape[1], q.shape[1], dtype=q.dtype, device=q.device)
    scores = torch.baddbmm(buf, q, k.transpose(1, 2), beta=0.0, alpha=q.shape[-1] ** -0.5)
    del buf
    probs = torch.softmax(scores.masked_fill(mask, -1e4), dim=-1)
    del scores
    if dropout:
        probs = torch.native_dropout(probs, 0.1, True)[0]
    return torch.bmm(probs, v)


def attention_backward(dropout: bool, ba: int = 32, s: int = 4096, d: int = 128) -> dict:
    """The profiler's attention core (baddbmm, causal mask, softmax, [dropout], bmm): the backward's peak
    above what was live before it, and the ops whose internal temporaries exceed 1 MiB, in units of one
    score buffer (ba x s x s, 16-bit)."""
    q, k, v = (torch.randn(ba, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = torch.ones(s, s, dtype=torch.bool, device="cuda").triu(1)
    score = ba * s * s * 2 / MiB
    ctx = _attention(q, k, v, mask, dropout)
    g = torch.ones_like(ctx)
    torch.cuda.synchronize()
    live = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    ctx.backward(g)
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - live) / MiB
    del ctx
    for t in (q, k, v):
        t.grad = None
    mode = OpMemory()
    with mode:
        ctx = _attention(q, k, v, mask, dropout)
        ctx.backward(g)
    torch.cuda.synchronize()
    return {"score_buffer_MiB": score, "backward_peak_over_live_scores": round(peak / score, 3),
            "ops_with_temporaries": [(name, round(extra / score, 3), round(new / score, 3))
                                     for name, extra, new in mode.rows if extra > 1]}


def main() -> None:
    torch.cuda.init()
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda}
    x = torch.zeros(1, device="cuda")
    out["context_MiB"] = outside_allocator()
    base = torch.cuda.memory_allocated()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    lin = torch.nn.Linear(4096, 4096, device="cuda", dtype=torch.bfloat16)
    tensors = torch.cuda.memory_allocated()
    y = lin(a)
    torch.cuda.synchronize()
    out["gemm_forward_extra_MiB"] = (torch.cuda.memory_allocated() - tensors - y.untyped_storage().nbytes()) / MiB
    before = torch.cuda.memory_allocated()
    y.sum().backward()
    torch.cuda.synchronize()
    grads = sum(t.grad.untyped_storage().nbytes() for t in (a, lin.weight, lin.bias))
    out["backward_extra_MiB"] = (torch.cuda.memory_allocated() - before - grads) / MiB
    out["context_and_kernels_after_MiB"] = outside_allocator()
    out["allocated_MiB"] = (torch.cuda.memory_allocated() - base) / MiB
    del x, a, lin, y
    out["attention_no_dropout"] = attention_backward(False)
    out["attention_dropout"] = attention_backward(True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
