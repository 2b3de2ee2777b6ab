"""Launch arguments that realise a solution: Megatron-LM flags, torchrun per node, and the rank order."""
from __future__ import annotations


def rank_layout(solution: dict) -> list[dict]:
    """Global rank (Megatron order: tp fastest, then dp, then pp) -> node and local GPU."""
    cfg = solution["config"]
    tp, dp = int(cfg["tp"]), int(cfg["dp"])
    out = []
    for w in solution["mapping"]:
        rank = w["tp_rank"] + tp * (w["dp_rank"] + dp * w["stage"])
        out.append({"rank": rank, "node": w["node"], "gpu": w["gpu"], "host": w.get("host", f"node{w['node']}")})
    out.sort(key=lambda r: r["rank"])
    return out


def megatron_args(solution: dict) -> list[str]:
    c = solution["config"]
    args = [f"--tensor-model-parallel-size {c['tp']}", f"--pipeline-model-parallel-size {c['pp']}",
            f"--micro-batch-size {c['micro_batch_size']}",
            f"--global-batch-size {c['micro_batch_size'] * c['num_microbatches'] * c['dp']}"]
    if c.get("schedule") == "interleaved" and c.get("vpp", 1) > 1:
        args.append(f"--virtual-pipeline-model-parallel-size {c['vpp']}")
    if c.get("sequence_parallel"):
        args.append("--sequence-parallel")
    rc = c.get("recompute", "none")
    if rc == "selective":
        args.append("--recompute-activations")
    elif rc == "full":
        args += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    if int(c.get("zero", 0)) >= 1:
        args.append("--use-distributed-optimizer")
    args.append(f"# environment: {ALLOC_ENV} (the memory estimate assumes it)")
    if solution.get("pipeline_engine") == "deepspeed":
        args.append("# pipeline_engine deepspeed: planned for Megatron-DeepSpeed's GPTModelPipe on DeepSpeed's pipeline "
                    "engine; add --deepspeed and a ds_config (the flags above are the ones it shares with Megatron-LM"
                    + ("; ZeRO 1 there is zero_optimization.stage 1, not --use-distributed-optimizer)"
                       if int(c.get("zero", 0)) >= 1 else ")"))
    if c.get("schedule") in ("zb-h1", "v-min", "v-half", "v-zb"):
        args.append(f"# schedule {c['schedule']}: needs a zero-bubble-capable Megatron fork (e.g. sail-sg zero-bubble)")
    return args


# The memory estimate's fragmentation term was measured with expandable segments (2% of the allocated peak);
# PyTorch's default allocator needed up to 20% more on an H100 (docs/notes/memory.md), so launch with it on.
ALLOC_ENV = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def torchrun_commands(solution: dict, master_port: int = 29500) -> list[str]:
    """One torchrun line per node, with CUDA_VISIBLE_DEVICES ordered so local rank k gets the planned GPU."""
    ranks = rank_layout(solution)
    nodes = sorted({r["node"] for r in ranks}, key=lambda n: min(r["rank"] for r in ranks if r["node"] == n))
    per_node = {n: [r for r in ranks if r["node"] == n] for n in nodes}
    master = per_node[nodes[0]][0]["host"]
    lines = []
    for idx, n in enumerate(nodes):
        rs = per_node[n]
        gpus = ",".join(str(r["gpu"]) for r in rs)
        lines.append(f"# {rs[0]['host']}: ranks {rs[0]['rank']}..{rs[-1]['rank']}\n"
                     f"{ALLOC_ENV} CUDA_VISIBLE_DEVICES={gpus} torchrun --nnodes {len(nodes)} --node-rank {idx} "
                     f"--nproc-per-node {len(rs)} --master-addr {master} --master-port {master_port} "
                     f"pretrain_gpt.py {' '.join(a for a in megatron_args(solution) if not a.startswith('#'))}")
    return lines


def hostfile(solution: dict) -> str:
    """Hosts in the order the node ranks must follow (slots = GPUs used per host)."""
    ranks = rank_layout(solution)
    seen, out = [], []
    for r in ranks:
        if r["node"] not in seen:
            seen.append(r["node"])
            out.append(f"{r['host']} slots={sum(1 for q in ranks if q['node'] == r['node'])}")
    return "\n".join(out) + "\n"
