"""A torchtitan-style Llama 3 8B training step on one GPU: what the planner's ZeRO-3 (torchtitan) model charges per
layer, per step and in memory, measured without any other GPU (issue #9).

The torchtitan rows of benchmarks/data/published_recipes_fsdp.yaml are predicted 13-22% too fast, on 500 W H100s and
on 700 W H200s alike (docs/notes/fsdp.md). This separates the one-GPU part of that error (kernels, torch.compile,
op-level selective checkpointing, the loss, FSDP2's copies, the optimizer) from the multi-GPU part (collectives and
their overlap): the same step, written here in plain PyTorch after torchtitan's recipe (not its code), on one rank.

What it builds, after pytorch/torchtitan @ e7c0cae9 (`models/llama3/model.py`, `parallelize_llama.py`,
`components/loss.py`, `train_configs/llama3_8b.toml`): Llama 3.1 8B dimensions with N layers; RMSNorm, complex RoPE,
repeat_kv, SDPA (forced to the flash back end: PyTorch's own FlashAttention-2 copy, charged to ZeRO-3 plans as
`sdpa_flash`), SwiGLU; op-level selective checkpointing
(save the outputs of mm, SDPA and max, except every second mm); each block torch.compile'd (fullgraph) after its
checkpoint wrapper; FSDP2 (`fully_shard`, bf16 parameters, fp32 reduction) per block and at the root on a one-rank
process group; the loss F.cross_entropy(pred.float()), compiled with the model (torchtitan since 2025) or eager
(torchtitan of Dec 2024); AdamW (fused), gradient clipping at 1.0. bf16, or with a variant ending in `-fp8` torchao's
Float8 training as torchtitan enables it (`convert_to_float8_training` of every block's Linear, tensor-wise dynamic
scaling, `enable_fsdp_float8_all_gather` and the scales precomputed after the optimizer step; the output layer stays
bf16; torchao carried as a wheel, e.g. 0.18.0); the op-level checkpoint policy saves `_scaled_mm` as it saves `mm`.

Per variant (compile / eager) and layer count: step time (median of timed steps after warm-up and compilation) and
the peak memory allocated and reserved. The per-layer cost is the difference of two layer counts.

Run on a lent GPU:  python benchmarks/gpu_torchtitan_step.py --out benchmarks/data/h200/torchtitan_step
Smoke run here:     python benchmarks/gpu_torchtitan_step.py --out /tmp/tts --device cpu --quick
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import sys
import time
from collections import defaultdict

LLAMA3_8B = {"dim": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336, "vocab": 128256, "theta": 500000.0, "eps": 1e-5}
QUICK = {"dim": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 256, "theta": 500000.0, "eps": 1e-5}


def build(torch, n_layers: int, d: dict, seq: int):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.hd = d["dim"] // d["heads"]
            self.wq = nn.Linear(d["dim"], d["heads"] * self.hd, bias=False)
            self.wk = nn.Linear(d["dim"], d["kv_heads"] * self.hd, bias=False)
            self.wv = nn.Linear(d["dim"], d["kv_heads"] * self.hd, bias=False)
            self.wo = nn.Linear(d["heads"] * self.hd, d["dim"], bias=False)
            self.w1 = nn.Linear(d["dim"], d["ffn"], bias=False)
            self.w3 = nn.Linear(d["dim"], d["ffn"], bias=False)
            self.w2 = nn.Linear(d["ffn"], d["dim"], bias=False)
            self.n1 = nn.RMSNorm(d["dim"], eps=d["eps"])
            self.n2 = nn.RMSNorm(d["dim"], eps=d["eps"])

        def rope(self, x, cis):                    # rotate pairs as complex numbers, in fp32
            xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
            return torch.view_as_real(xc * cis.view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)

        def forward(self, x, cis):
            b, s, _ = x.shape
            h = self.n1(x)
            q = self.rope(self.wq(h).view(b, s, -1, self.hd), cis)
            k = self.rope(self.wk(h).view(b, s, -1, self.hd), cis)
            v = self.wv(h).view(b, s, -1, self.hd)
            rep = d["heads"] // d["kv_heads"]          # GQA: K/V repeated to the query heads before SDPA
            k = k.unsqueeze(3).expand(b, s, k.shape[2], rep, self.hd).reshape(b, s, -1, self.hd)
            v = v.unsqueeze(3).expand(b, s, v.shape[2], rep, self.hd).reshape(b, s, -1, self.hd)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            x = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
            h = self.n2(x)
            return x + self.w2(F.silu(self.w1(h)) * self.w3(h))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(d["vocab"], d["dim"])
            self.layers = nn.ModuleList(Block() for _ in range(n_layers))
            self.norm = nn.RMSNorm(d["dim"], eps=d["eps"])
            self.out = nn.Linear(d["dim"], d["vocab"], bias=False)
            hd = d["dim"] // d["heads"]
            f = 1.0 / (d["theta"] ** (torch.arange(0, hd, 2).float() / hd))
            ang = torch.outer(torch.arange(seq).float(), f)
            self.register_buffer("cis", torch.polar(torch.ones_like(ang), ang), persistent=False)

        def forward(self, tokens):
            x = self.emb(tokens)
            for layer in self.layers:
                x = layer(x, self.cis)
            return self.out(self.norm(x))

    return Model()


@functools.lru_cache(maxsize=1)
def _sac_wrapper(torch):
    """Op-level selective checkpointing as torchtitan's `selective_ac_option = "op"`: save mm / SDPA / max outputs,
    recompute the rest and every second mm. One class and one context function for every block, so that
    torch.compile traces the block once (a class per block fails its type guard and recompiles)."""
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts
    ops = torch.ops.aten
    mms = {ops.mm.default, ops._scaled_mm.default}
    save = mms | {ops._scaled_dot_product_flash_attention.default,
                  ops._scaled_dot_product_efficient_attention.default, ops.max.default}

    def policy_for(count):
        def policy(ctx, func, *args, **kwargs):
            key = "recompute" if ctx.is_recompute else "forward"
            if func in mms:
                count[key] += 1
            keep = func in save and not (func in mms and count[key] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
        return policy

    def context():
        return create_selective_checkpoint_contexts(policy_for(defaultdict(int)))

    class SACBlock(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, cis):
            return checkpoint(self.inner, x, cis, use_reentrant=False, context_fn=context, preserve_rng_state=False)
    return SACBlock


# kernel-name fragments -> what the planner calls the work (first match wins)
KERNEL_CLASSES = (("attention", ("flash", "fmha", "attention")), ("nccl", ("nccl",)),
                  ("optimizer", ("multi_tensor", "adam", "foreach")),
                  ("gemm", ("gemm", "sm90_xmma", "cutlass", "nvjet", "cublas", "splitk")),
                  ("triton", ("triton",)))


def profile_kernels(torch, step, sync, steps: int = 2) -> dict:
    """GPU kernel time per step (ms) by class, from torch.profiler over `steps` steps."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        sync()
    out, names = defaultdict(float), defaultdict(float)
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if not us or getattr(e, "device_type", None) is not None and "CUDA" not in str(e.device_type):
            continue
        name = e.key.lower()
        cls = next((c for c, frags in KERNEL_CLASSES if any(f in name for f in frags)), "other")
        out[cls] += us / 1e3 / steps
        if cls in ("other", "triton"):
            names[f"{cls}: {e.key[:120]}"] += us / 1e3 / steps
    out = dict(out)
    # the largest element-wise / copy kernels by name: what "other" and "triton" are made of
    out["top"] = dict(sorted(names.items(), key=lambda kv: -kv[1])[:40])
    return out


def run_variant(torch, dev, n_layers, compile_, dims, b, seq, steps, warmup, fsdp, flash, profile=False,
                float8=False):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.manual_seed(0)
    model = build(torch, n_layers, dims, seq).to(dev)
    if float8:                    # torchtitan's float8 converter: every Linear of the blocks, not the output layer
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        convert_to_float8_training(model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=fsdp),
                                   module_filter_fn=lambda mod, fqn: fqn != "out")
    for i, blk in enumerate(model.layers):
        w = _sac_wrapper(torch)(blk)
        if compile_:
            w = torch.compile(w, fullgraph=True)
        model.layers[i] = w
    if fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mesh = init_device_mesh(dev, (1,))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for i, blk in enumerate(model.layers):
            fully_shard(blk, mesh=mesh, mp_policy=mp, reshard_after_forward=i < n_layers - 1)
        fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    else:
        model = model.to(torch.bfloat16 if dev == "cuda" else torch.float32)

    def ce(pred, labels):
        return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
    loss_fn = torch.compile(ce) if compile_ else ce
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, eps=1e-8, weight_decay=0.1,
                            **({"fused": True} if dev == "cuda" else {}))
    tokens = torch.randint(0, dims["vocab"], (b, seq), device=dev)
    labels = torch.randint(0, dims["vocab"], (b, seq), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        # backward inside the back-end choice too: checkpointing recomputes the SDPA there
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]) if flash else contextlib.nullcontext():
            loss = loss_fn(model(tokens), labels)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        if float8 and fsdp:        # torchtitan: one all-reduce of every weight's amax for the next all-gather
            from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp
            precompute_float8_dynamic_scale_for_fsdp(model)

    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    sync()
    warm_s = time.perf_counter() - t0
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    kernels = None
    if profile and dev == "cuda":
        try:
            kernels = profile_kernels(torch, step, sync)
        except Exception as e:         # the timings stand without it
            kernels = {"error": f"{type(e).__name__}: {e}"[:200]}
    row = {"layers": n_layers, "compile": compile_, "float8": float8, "fsdp": fsdp, "flash": flash, "batch": b, "seq": seq,
           "warmup_s": warm_s, "step_s": statistics.median(times), "step_s_all": times}
    if kernels:
        row["kernels_ms_per_step"] = kernels
    if dev == "cuda":
        row.update(max_allocated_GiB=torch.cuda.max_memory_allocated() / 2**30,
                   max_reserved_GiB=torch.cuda.max_memory_reserved() / 2**30)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--layers", default="4,8")
    ap.add_argument("--variants", default="compile,eager", help="compile, eager, compile-fp8, eager-fp8")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seq", type=int, default=8192, help="tokens per sequence (torchtitan's llama3_8b.toml: 8192)")
    ap.add_argument("--batch", type=int, default=2, help="local batch size (the torchtitan rows: 2)")
    ap.add_argument("--no-fsdp", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also kernel time by class (torch.profiler, 2 steps)")
    a = ap.parse_args(argv)
    import torch
    os.makedirs(a.out, exist_ok=True)
    dims, b, seq = (QUICK, 2, 64) if a.quick else (LLAMA3_8B, a.batch, a.seq)
    fsdp = not a.no_fsdp
    if fsdp:
        import torch.distributed as dist
        dist.init_process_group("nccl" if a.device == "cuda" else "gloo", init_method="tcp://127.0.0.1:29533",
                                rank=0, world_size=1)
    info = {"torch": torch.__version__, "created": time.strftime("%Y-%m-%d %H:%M"),
            **({"gpu": torch.cuda.get_device_name(0)} if a.device == "cuda" else {})}
    rows = []
    for variant in a.variants.split(","):
        for n in (int(x) for x in a.layers.split(",")):
            t = time.perf_counter()
            try:
                r = run_variant(torch, a.device, n, variant.startswith("compile"), dims, b, seq, a.steps, a.warmup,
                                fsdp, flash=a.device == "cuda", profile=a.profile, float8=variant.endswith("-fp8"))
            except Exception as e:      # one variant failing keeps the others
                r = {"layers": n, "compile": variant.startswith("compile"), "float8": variant.endswith("-fp8"),
                     "error": f"{type(e).__name__}: {e}"[:400]}
            rows.append(r)
            if a.device == "cuda":
                torch.cuda.empty_cache()
            print(f"{variant} L{n}: " + (f"step {r['step_s'] * 1e3:.1f} ms, warm-up {r['warmup_s']:.0f} s"
                  + (f", max alloc {r['max_allocated_GiB']:.2f} GiB, reserved {r['max_reserved_GiB']:.2f} GiB"
                     if "max_allocated_GiB" in r else "") if "step_s" in r else r["error"])
                  + f" ({time.perf_counter() - t:.0f} s)", flush=True)
            if r.get("kernels_ms_per_step"):
                print("  kernels ms/step: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(r["kernels_ms_per_step"].items())
                                                     if isinstance(v, float)), flush=True)
            with open(os.path.join(a.out, f"steps_s{seq}_b{b}.json" if (seq, b) != (8192, 2) or a.quick else "steps.json"),
                      "w") as fh:
                json.dump({"info": info, "rows": rows}, fh, indent=1)
    for variant in a.variants.split(","):
        got = sorted((r["layers"], r["step_s"]) for r in rows if "step_s" in r
                     and r["compile"] == variant.startswith("compile") and r.get("float8", False) == variant.endswith("-fp8"))
        if len(got) >= 2:
            (n0, t0), (n1, t1) = got[0], got[-1]
            print(f"{variant}: per layer {(t1 - t0) / (n1 - n0) * 1e3:.2f} ms; rest of the step "
                  f"{(t0 - n0 * (t1 - t0) / (n1 - n0)) * 1e3:.1f} ms")
    if fsdp:
        import torch.distributed as dist
        dist.destroy_process_group()
    return 0 if all("step_s" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
