"""Independent hand count (no planner import) of per-GPU memory and iteration-time parts of four shipped plans:
the audit of Nov 27 (docs/notes/memory.md, "An audit of four plans' cost breakdowns"). Run: python benchmarks/audit_hand_count_nov27.py

Rules and sources (commits: Megatron-LM d98e8a64, TransformerEngine d0067d0, torchtitan mirror HEAD):
- vocab padded to 128 * tp (megatron/training/vocab_utils.py:58)
- weights bf16 2 B/param; norms not TP-sharded
- main_grad dtype: fp32 if grad_reduce_in_fp32 else param dtype (param_and_grad_buffer.py); planner spec default
  false -> 2 B; Megatron-LM's arguments.py default (bf16, no --grad-reduce-in-bf16) -> 4 B. Both printed.
- distributed optimizer: fp32 main param + Adam m, v = 12 B/param over the dp x cp group (intra_dp_cp_group,
  distributed_data_parallel.py:149)
- interleaved warmup = 2(p-r-1) + (v-1)*g, g = p (schedules.py:964, model_parallel_config.py:568), +1 in steady state
- layer split with account_for_embedding/loss (transformer_block.py:150-200)
- activations: Korthikanti et al. 2022 Table 2 (TP+SP: everything / t), adapted to Llama: no dropout (no masks),
  fused attention (no 5as^2b; TE FusedAttnFunc saves q, k, v, out), RoPE q/k copies, SwiGLU (fc1 out 2f + fc2 in f)
- full recompute: the layer input 2sbh/t per layer (Megatron-Core CheckpointFunction on SP-sharded input)
- logits: vocab-parallel CE keeps fp32 exp_logits (cross_entropy.py:25, 181) + the 16-bit logits/grad (6 B/elt)
- CP ring (TE AttnFuncWithCPAndKVP2P): fwd cp-1 KV sends, bwd kv + dkv: 2(cp-1) KV-sized sends
"""
GiB = 2**30


def pad_vocab(V, tp):
    m = 128 * tp
    return -(-V // m) * m


class M:
    def __init__(s, L, h, a, kvh, f, V):
        s.L, s.h, s.a, s.kvh, s.f, s.V = L, h, a, kvh, f, V
        s.hd = h // a
        s.kv = kvh * s.hd
        s.attn = 2 * h * h + 2 * h * s.kv
        s.mlp = 3 * h * f
        s.layer_sharded = s.attn + s.mlp
        s.layer_repl = 2 * h


M8 = M(32, 4096, 32, 8, 14336, 128256)
M70 = M(80, 8192, 64, 8, 28672, 128256)
M405 = M(126, 16384, 128, 8, 53248, 128256)


def layers_per_chunk(m, p, v, acc_emb=False, acc_loss=False):
    """[rank][chunk] -> layers (Megatron-Core get_num_layers_to_build, even split)."""
    n = m.L + acc_emb + acc_loss
    per = n // (p * v)
    out = [[per] * v for _ in range(p)]
    if acc_emb:
        out[0][0] -= 1
    if acc_loss:
        out[p - 1][v - 1] -= 1
    assert sum(map(sum, out)) == m.L
    return out


def inflight_layers(chunks, p, r, v, m_mb):
    """Max layer-microbatches held on rank r under Megatron-Core's interleaved order (v=1: 1F1B)."""
    if p == 1:
        return max(chunks[r])  # forward_backward_no_pipelining: one micro-batch at a time
    g = p
    fwd = []
    for k in range(0, m_mb, g):
        for c in range(v):
            for mb in range(k, min(k + g, m_mb)):
                fwd.append((c, mb))
    bwd = [(v - 1 - c, mb) for c, mb in fwd]
    total = m_mb * v
    W = (p - r - 1) * 2 + (v - 1) * g if v > 1 else p - r - 1
    W = min(W, total)
    held = 0
    peak = 0
    fi = bi = 0
    for _ in range(W):
        held += chunks[r][fwd[fi][0]]
        fi += 1
        peak = max(peak, held)
    while fi < total:
        held += chunks[r][fwd[fi][0]]
        fi += 1
        peak = max(peak, held)
        held -= chunks[r][bwd[bi][0]]
        bi += 1
    return peak


def act_layer_bytes(m, tokens, t, recompute):
    """Per layer per micro-batch bytes held (TP+SP, fused attention, no dropout)."""
    if recompute == "full":
        return 2 * tokens * m.h / t
    per_tok = (10 * m.h            # 5 h-wide saves: norm1 in, qkv gemm in, attn out (proj in), norm2 in, fc1 in
               + 2 * (m.h + 2 * m.kv)  # QKV output (v a view keeps it alive)
               + 2 * (m.h + m.kv)      # RoPE'd q, k
               + 6 * m.f) / t          # SwiGLU: fc1 out (2f) 2 B + fc2 in (f) 2 B
    per_tok += 4 * m.a / t             # softmax lse fp32 (fused attention)
    return per_tok * tokens


def plan(name, m, tp, pp, dp, mbs, nmb, v, rc, cp=1, seq=8192, acc_emb=False, acc_loss=False, grad_fp32=False):
    Vp = pad_vocab(m.V, tp)
    chunks = layers_per_chunk(m, pp, v, acc_emb, acc_loss)
    tokens = seq // cp * mbs
    print(f"=== {name}: tp{tp} pp{pp} dp{dp} cp{cp} mbs{mbs} m{nmb} v{v} rc={rc}; Vpad={Vp}")
    res = []
    for r in range(pp):
        nl = sum(chunks[r])
        params = nl * (m.layer_sharded // tp + m.layer_repl)
        if r == 0:
            params += Vp * m.h // tp
        if r == pp - 1:
            params += Vp * m.h // tp + m.h
        w = params * 2
        g2, g4 = params * 2, params * 4
        opt = params * 12 / (dp * cp)
        infl = inflight_layers(chunks, pp, r, v, nmb)
        act = infl * act_layer_bytes(m, tokens, tp, rc)
        logits = (tokens * Vp // tp * 6) if r == pp - 1 else 0
        # added after the comparison (the hand count had left them out): final-norm and output-layer inputs, 4sbh/t
        edge = 4 * tokens * m.h / tp if r == pp - 1 else 0
        # TE's CP path (backends.py makes q, k, v contiguous; AttnFuncWithCPAndKVP2P saves q, the received K/V buffer
        # and out): the QKV output and the RoPE'd k are freed, (h + kv) elements per token per layer fewer
        cp_less = infl * tokens * 2 * (m.h + m.kv) / tp if cp > 1 and rc != "full" else 0
        res.append({"r": r, "layers": nl, "params": params})
        print(f" stage {r}: layers {nl} params/GPU {params/1e9:.4f}e9 weights {w/GiB:.3f} grads(bf16) {g2/GiB:.3f}"
              f" grads(fp32) {g4/GiB:.3f} opt {opt/GiB:.3f} inflight {infl} layer-mbs act {act/GiB:.3f}"
              f" logits {logits/GiB:.3f} | +edge {edge/GiB:.3f}" + (f", TE CP path -{cp_less/GiB:.3f}" if cp_less else ""))
    # FLOPs per iteration
    gbs = dp * mbs * nmb
    T = gbs * seq
    N = m.L * m.layer_sharded + m.V * m.h  # matmul params (output layer, unpadded; embedding is a lookup)
    dense = 6 * N * T
    attn_full = 12 * m.L * seq * m.h * T  # QK^T + AV, fwd+bwd, every key
    print(f" FLOPs: 6NT {dense:.4e}; attention non-causal {attn_full:.4e} causal {attn_full/2:.4e};"
          f" model total causal {dense+attn_full/2:.4e} non-causal {dense+attn_full:.4e}"
          f" (+full recompute fwd: x{(8/6) if rc=='full' else 1:.3f})")
    # DP bytes per GPU per iteration (ring RS of grads + AG of bf16 params over dp*cp), worst stage
    n = dp * cp
    for r in range(pp):
        P = res[r]["params"]
        rs2 = (n - 1) / n * P * 2
        rs4 = (n - 1) / n * P * 4
        ag = (n - 1) / n * P * 2
        print(f" DP stage {r}: RS bytes/GPU bf16 {rs2/1e9:.3f} GB (fp32 {rs4/1e9:.3f}), AG {ag/1e9:.3f} GB;"
              f" buffer {P*2/1e9:.3f} GB")
    # bubble
    b = (pp - 1) / (nmb * v) if pp > 1 else 0.0
    print(f" bubble (p-1)/(m v) = {b:.5f}")
    # TP bytes per layer per micro-batch (per GPU ring bytes sent), SP
    msg = tokens * m.h * 2  # full [s/cp, b, h] bf16
    per = (tp - 1) / tp * msg
    ncoll = 4 + 6 + (4 if rc == "full" else 0)
    print(f" TP: one AG/RS message {msg/1e6:.2f} MB full, {per/1e6:.2f} MB sent/GPU; collectives/layer/mb: fwd 4,"
          f" bwd 6 (2 wgrad re-gathers), recompute {4 if rc=='full' else 0} -> {ncoll*per/1e6:.1f} MB/layer/mb"
          f" (Korthikanti count 8 -> {8*per/1e6:.1f})")
    if cp > 1:
        kvb = tokens * 2 * m.kv / tp * 2
        print(f" CP: KV per step {kvb/1e6:.2f} MB; fwd {(cp-1)*kvb/1e6:.1f} MB, bwd {2*(cp-1)*kvb/1e6:.1f} MB,"
              f" total {3*(cp-1)*kvb/1e6:.1f} MB per layer per mb")
    return res


plan("70B", M70, 8, 2, 16, 2, 32, 10, "none")
plan("405B", M405, 8, 4, 16, 1, 16, 2, "full", acc_emb=True, acc_loss=True)
plan("8B", M8, 2, 1, 64, 2, 2, 1, "none")
plan("8B-128k", M8, 4, 1, 4, 1, 16, 1, "none", cp=4, seq=131072)
