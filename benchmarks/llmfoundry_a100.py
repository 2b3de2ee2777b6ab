"""An independent check of the A100 compute model with fused attention: MosaicML llm-foundry's MPT table.

Source: mosaicml/llm-foundry @ 5e85bd62d4ec9e13353ca95877477602ab538e5b, scripts/train/benchmarking/README.md, table
"A100 80GB with 1600 Gbps node-node interconnect (RoCE)". The A100 tables there were added in b2a43a14 (Oct 2023) and
not changed since (diffed to the newest README, 49521837: typo fixes only). The rows below are that table's lines,
copied verbatim, for the models of 1B parameters and more.

What the table leaves out, read at the commit that added it (b2a43a1477a45f40f4086a1c72f851b0ab42d0ac):
- scripts/train/benchmarking/submit_benchmarks.py `run_config`: installs llm-foundry at branch v0.3.0 with
  `pip install -e .[gpu]` (setup.py of v0.3.0: flash-attn 1.0.9, triton-pre-mlir, torch < 2.1.1), sets
  `attn_impl` from `--attn_impl` (default `triton`; sweep.sh passes none) and `norm_type: low_precision_layernorm`;
  `mod_parameters` sets `fsdp_config.mixed_precision` to its default 'DEFAULT' (sweep.sh passes none). sweep.sh's
  image: mosaicml/pytorch:2.1.0_cu121 (torch 2.1.0).
- scripts/train/yamls/pretrain/mpt-*.yaml: d_model / n_heads / n_layers (head dim 128 everywhere), vocab 50368,
  `fsdp_config: {sharding_strategy: FULL_SHARD, activation_checkpointing: true, activation_checkpointing_reentrant:
  false, limit_all_gathers: true}` (the rows' own column overrides activation checkpointing), no compile config.
- llm-foundry v0.3.0 MPTConfig defaults (llmfoundry/models/mpt/configuration_mpt.py): biases, learned positions of
  max_seq_len rows, no ALiBi, GeLU MLP 4h, dropout 0, tied output: the planner's gpt family (models/mpt-*.yaml;
  its parameter count equals the table's NumParams column for every row, seq-dependent positions included).
- `attn_impl: triton` = llmfoundry/models/layers/flash_attn_triton.py (v0.3.0): Tri Dao's Triton FlashAttention
  (flash-attention @ eff9fe6b flash_attn/flash_attn_triton.py), whose docstring says "Overall Triton forward +
  backward is slightly slower than CUDA forward + backward" (CUDA = FlashAttention-1).
- mosaicml/composer v0.16.4 (llm-foundry v0.3.0 pins composer >= 0.16.3, < 0.17):
  composer/trainer/mosaic_fsdp_utils.py `get_mixed_precision`: DEFAULT = bf16 parameters, fp32 gradient reduce
  (the planner's FSDP costing, costs/fsdp.py); PURE = bf16 reduce. composer/trainer/trainer.py
  `_train_microbatches`: no `no_sync` unless the model is DDP, so FSDP reduce-scatters every micro-batch (as the
  planner's FSDP2 model does).

How a row becomes a planner input: FULL_SHARD -> zero 3 over all GPUs (tp 1, pp 1, dp = GPUs), MicroBatchSize ->
mbs, GradAccum -> micro-batches, Activation Checkpointing True -> recompute full (every MPTBlock is checkpointed:
modeling_mpt.py `activation_checkpointing_fn`), amp_bf16 -> precision bf16, attention fused (the default; on A100 a
ZeRO-3 plan is charged FlashAttention-2's published A100 panel), kernels fused (the planner's `eager` is for
torchtitan's Llama block only; MPT's eager element-wise passes, counted from blocks.py, move ~36h bytes per token
forward against the fused gpt model's 50h, so this mismatch makes the planner slower, not faster). Cluster:
clusters/mosaicml-a100-80gb-roce.yaml (inter-node bandwidth nominal: the table's 1600 Gb/s per node as 8 x 200).

Rows left out of the summary (printed, marked `partial`): the 70B rows run MP mode PURE, i.e. the gradient
reduce-scatter in bf16; the planner has no such knob for ZeRO-3 (costs/fsdp.py REDUCE_BYTES = 4) and charges fp32,
twice the run's bytes, so its prediction there errs on the slow side.

Printed per row: published and predicted tokens/s/GPU, the error (predicted / published - 1: > 0 means the planner
is faster than the run, i.e. optimistic), MFU by llm-foundry's own formula (README, "MFU") from both throughputs,
the predicted peak memory, and two diagnostics of the prediction: the share of fused attention in the GPU time, and
the tokens/s/GPU with attention charged at FlashAttention-1's rate instead of FlashAttention-2's (a what-if, not the
prediction: FlashAttention-2's A100 figure, panel d, causal, head dim 128, prints FlashAttention-1 (CUDA) at 55, 62,
69, 76, 80, 83 TFLOP/s at 512..16k against FlashAttention-2's 99, 133, 155, 173, 182, 189; the run's Triton kernel
is "slightly slower" than FlashAttention-1 by its own docstring, so this what-if is an upper bound on its speed).
Nothing here changes a profile or a constant.

Run:  python benchmarks/llmfoundry_a100.py [--json] [--rows ID,ID]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass, replace

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

from planner.config import ParallelConfig  # noqa: E402
from planner.io import load_yaml  # noqa: E402

SOURCE = {"repo": "mosaicml/llm-foundry", "commit": "5e85bd62d4ec9e13353ca95877477602ab538e5b",
          "path": "scripts/train/benchmarking/README.md",
          "table": "A100 80GB with 1600 Gbps node-node interconnect (RoCE)",
          "knobs_commit": "b2a43a1477a45f40f4086a1c72f851b0ab42d0ac"}
CLUSTER = os.path.join(ROOT, "clusters", "mosaicml-a100-80gb-roce.yaml")
PEAK_TFLOPS = 312.0          # the table's GPU_AVAILABLE_FLOPS for a100_80gb (its MFU column is against it)

# The table's columns, in its order (README header).
COLUMNS = ("Model", "SeqLen (T)", "# GPUs", "GPU", "MFU", "HFU", "Model TFLOP", "MicroBatchSize", "GradAccum",
           "GlobalBatchSize", "Throughput (S/s)", "Throughput (T/s)", "Throughput (T/s/GPU)", "GlobalBatchSize (T)",
           "Precision", "MP Mode", "Sharding Strategy", "Activation Checkpointing", "Activation CPUOffload",
           "NumParams")

# Verbatim from the table (models >= 1B).
TABLE = """\
|  70b | 2048 | 64 | a100_80gb | 53.33 | 71.1 | 166 | 8 | 4 | 2048 | 12 | 26274 | 410 | 4194304 | bf16 | PURE | FULL_SHARD | True | False | 64862437376 |
|  70b | 2048 | 32 | a100_80gb | 48.56 | 64.75 | 151 | 2 | 16 | 1024 | 5 | 11962 | 373 | 2097152 | bf16 | PURE | FULL_SHARD | True | False | 64862437376 |
|  30b | 8192 | 8 | a100_80gb | 39.38 | 52.5 | 122 | 1 | 21 | 168 | 0 | 4594 | 574 | 1376256 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 30019254272 |
|  30b | 4096 | 8 | a100_80gb | 51.37 | 68.49 | 160 | 1 | 21 | 168 | 1 | 6513 | 814 | 688128 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 29989894144 |
|  30b | 2048 | 8 | a100_80gb | 55.3 | 73.74 | 172 | 3 | 21 | 504 | 3 | 7330 | 916 | 1032192 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 29975214080 |
|  30b | 1024 | 8 | a100_80gb | 55.82 | 74.43 | 174 | 6 | 21 | 1008 | 7 | 7571 | 946 | 1032192 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 29967874048 |
|  30b | 512 | 8 | a100_80gb | 56.4 | 75.2 | 175 | 12 | 21 | 2016 | 15 | 7739 | 967 | 1032192 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 29964204032 |
|  13b | 32768 | 8 | a100_80gb | 51.69 | 68.92 | 161 | 1 | 3 | 24 | 0 | 8134 | 1016 | 786432 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 13011240960 |
|  13b | 16384 | 8 | a100_80gb | 54.07 | 72.1 | 168 | 3 | 3 | 72 | 0 | 11454 | 1431 | 1179648 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 12927354880 |
|  13b | 8192 | 8 | a100_80gb | 56.07 | 74.76 | 174 | 5 | 3 | 120 | 1 | 14362 | 1795 | 983040 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 12885411840 |
|  13b | 4096 | 8 | a100_80gb | 57.62 | 76.82 | 179 | 10 | 3 | 240 | 4 | 16482 | 2060 | 983040 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 12864440320 |
|  13b | 2048 | 8 | a100_80gb | 59.57 | 59.57 | 185 | 2 | 3 | 48 | 8 | 18097 | 2262 | 98304 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 12853954560 |
|  13b | 1024 | 8 | a100_80gb | 59.48 | 79.3 | 185 | 40 | 3 | 960 | 18 | 18647 | 2330 | 983040 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 12848711680 |
|  7b | 65536 | 8 | a100_80gb | 46.97 | 62.63 | 146 | 1 | 2 | 16 | 0 | 8108 | 1013 | 1048576 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 6918905856 |
|  7b | 32768 | 8 | a100_80gb | 49.46 | 65.94 | 154 | 2 | 2 | 32 | 0 | 13382 | 1672 | 1048576 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 6784688128 |
|  7b | 16384 | 8 | a100_80gb | 51.96 | 69.28 | 162 | 4 | 2 | 64 | 1 | 19629 | 2453 | 1048576 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 6717579264 |
|  7b | 8192 | 8 | a100_80gb | 54.47 | 72.62 | 169 | 8 | 2 | 128 | 3 | 25655 | 3206 | 1048576 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 6684024832 |
|  7b | 4096 | 8 | a100_80gb | 54.84 | 73.12 | 171 | 16 | 2 | 256 | 7 | 29472 | 3684 | 1048576 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 6667247616 |
|  7b | 2048 | 8 | a100_80gb | 64.23 | 64.23 | 200 | 6 | 2 | 96 | 18 | 37130 | 4641 | 196608 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 6658859008 |
|  7b | 1024 | 8 | a100_80gb | 58.01 | 77.35 | 180 | 64 | 2 | 1024 | 34 | 34857 | 4357 | 1048576 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 6654664704 |
|  3b | 65536 | 8 | a100_80gb | 46.05 | 61.41 | 143 | 1 | 2 | 16 | 0 | 14137 | 1767 | 1048576 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 2814366720 |
|  3b | 32768 | 8 | a100_80gb | 47.18 | 62.91 | 147 | 3 | 6 | 144 | 0 | 24235 | 3029 | 4718592 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 2730480640 |
|  3b | 16384 | 8 | a100_80gb | 57.13 | 57.13 | 178 | 1 | 6 | 48 | 2 | 44233 | 5529 | 786432 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 2688537600 |
|  3b | 8192 | 8 | a100_80gb | 59.34 | 59.34 | 185 | 3 | 6 | 144 | 7 | 61567 | 7695 | 1179648 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 2667566080 |
|  3b | 4096 | 8 | a100_80gb | 60.53 | 60.53 | 188 | 5 | 6 | 240 | 18 | 75658 | 9457 | 983040 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 2657080320 |
|  3b | 2048 | 8 | a100_80gb | 62.11 | 62.11 | 193 | 10 | 2 | 160 | 42 | 86491 | 10811 | 327680 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 2651837440 |
|  3b | 1024 | 8 | a100_80gb | 62.73 | 62.73 | 195 | 20 | 6 | 960 | 90 | 92643 | 11580 | 983040 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 2649216000 |
|  3b | 512 | 8 | a100_80gb | 63.71 | 63.71 | 198 | 40 | 6 | 1920 | 189 | 97019 | 12127 | 983040 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 2647905280 |
|  1b | 65536 | 8 | a100_80gb | 46.18 | 61.57 | 144 | 1 | 2 | 16 | 0 | 24353 | 3044 | 1048576 | amp_bf16 | DEFAULT | FULL_SHARD | True | False | 1445974016 |
|  1b | 32768 | 8 | a100_80gb | 55.52 | 55.52 | 173 | 1 | 4 | 32 | 1 | 50207 | 6275 | 1048576 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 1378865152 |
|  1b | 16384 | 8 | a100_80gb | 56.6 | 56.6 | 176 | 2 | 4 | 64 | 4 | 79650 | 9956 | 1048576 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 1345310720 |
|  1b | 8192 | 8 | a100_80gb | 56.69 | 56.69 | 176 | 3 | 4 | 96 | 13 | 110516 | 13814 | 786432 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 1328533504 |
|  1b | 4096 | 8 | a100_80gb | 59.0 | 59.0 | 184 | 7 | 4 | 224 | 34 | 142457 | 17807 | 917504 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 1320144896 |
|  1b | 2048 | 8 | a100_80gb | 59.86 | 59.86 | 186 | 14 | 4 | 448 | 80 | 164109 | 20513 | 917504 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 1315950592 |
|  1b | 1024 | 8 | a100_80gb | 60.15 | 60.15 | 187 | 18 | 4 | 576 | 172 | 176898 | 22112 | 589824 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 1313853440 |
|  1b | 512 | 8 | a100_80gb | 60.68 | 60.68 | 189 | 56 | 4 | 1792 | 361 | 185186 | 23148 | 917504 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 1312804864 |
"""

# FlashAttention-2's A100 figure, panel (d): causal, head dim 128, fwd + bwd TFLOP/s at 512..16k tokens
# (Dao-AILab/flash-attention @ 0251105a2fb19d2957484b7f023cd8c115286ced assets/flash2_a100_fwd_bwd_benchmark.png).
# FlashAttention-2's bars are the planner's A100 row (costs/compute.py FUSED_ATTENTION_EFFICIENCY); FlashAttention-1's
# (CUDA) bars feed only the what-if column.
FA_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
FA1_A100_CAUSAL_D128 = (55, 62, 69, 76, 80, 83)
FA2_A100_CAUSAL_D128 = (99, 133, 155, 173, 182, 189)


@dataclass(frozen=True)
class Row:
    """One line of the table, typed; `id` is model-seq-gpus (unique in the table for these models)."""
    model: str
    seq: int
    gpus: int
    mfu: float                  # percent, the table's
    mbs: int
    accum: int
    gbs: int
    tokens_per_s: float         # Throughput (T/s), all GPUs
    precision: str
    mp_mode: str
    sharding: str
    checkpointing: bool
    cpu_offload: bool
    num_params: int

    @property
    def id(self) -> str:
        return f"mpt-{self.model}-s{self.seq}-g{self.gpus}"

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.gpus


def _bool(cell: str, where: str) -> bool:
    if cell not in ("True", "False"):
        raise ValueError(f"{where}: {cell!r} is not True / False")
    return cell == "True"


def parse_table(text: str = TABLE) -> list[Row]:
    """The table's lines -> Rows (ValueError naming the line and column on a malformed cell)."""
    rows, seen = [], set()
    for n, line in enumerate(text.strip().splitlines(), 1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != len(COLUMNS):
            raise ValueError(f"table line {n}: {len(cells)} cells, expected {len(COLUMNS)}")
        c = dict(zip(COLUMNS, cells))
        try:
            row = Row(model=c["Model"], seq=int(c["SeqLen (T)"]), gpus=int(c["# GPUs"]), mfu=float(c["MFU"]),
                      mbs=int(c["MicroBatchSize"]), accum=int(c["GradAccum"]), gbs=int(c["GlobalBatchSize"]),
                      tokens_per_s=float(c["Throughput (T/s)"]), precision=c["Precision"], mp_mode=c["MP Mode"],
                      sharding=c["Sharding Strategy"],
                      checkpointing=_bool(c["Activation Checkpointing"], f"table line {n}"),
                      cpu_offload=_bool(c["Activation CPUOffload"], f"table line {n}"),
                      num_params=int(c["NumParams"]))
        except ValueError as e:
            raise ValueError(f"table line {n}: {e}") from None
        if c["GPU"] != "a100_80gb":
            raise ValueError(f"table line {n}: GPU {c['GPU']!r}, this check is for a100_80gb")
        if row.mbs * row.accum * row.gpus != row.gbs:
            raise ValueError(f"table line {n}: mbs {row.mbs} x accum {row.accum} x GPUs {row.gpus} != gbs {row.gbs}")
        if row.id in seen:
            raise ValueError(f"table line {n}: duplicate row {row.id}")
        seen.add(row.id)
        rows.append(row)
    return rows


def foundry_mfu(row: Row, tokens_per_s: float) -> float:
    """llm-foundry's MFU (README, "MFU"): (3 flops_per_seq + 3 attn_flops_per_seq) seq/s / (GPUs x peak), with
    flops_per_seq = 2 n_params seq (embeddings included) and attn_flops_per_seq = n_layers 2 2 d_model seq^2."""
    m = model_spec(row)
    per_seq = 2 * row.num_params * row.seq
    attn = m.num_layers * 2 * 2 * m.hidden_size * row.seq ** 2
    return 3 * (per_seq + attn) * (tokens_per_s / row.seq) / (row.gpus * PEAK_TFLOPS * 1e12)


def excluded(row: Row) -> str | None:
    """Why a row is not expressible exactly (kept out of the summary), or None."""
    if row.mp_mode != "DEFAULT":
        return (f"MP mode {row.mp_mode}: the gradient reduce-scatter in {row.precision}; the planner's ZeRO-3 always "
                "reduces in fp32 (costs/fsdp.py REDUCE_BYTES), twice the bytes")
    if row.sharding != "FULL_SHARD" or row.cpu_offload:
        return f"{row.sharding}, CPU offload {row.cpu_offload}: not the planner's ZeRO-3"
    return None


# ---- row -> spec + config ---------------------------------------------------------------------------------------

def model_dict(row: Row) -> dict:
    """models/mpt-<size>.yaml with the row's learned-position rows (MPT sizes them max_seq_len = the run's seq)."""
    m = dict(load_yaml(os.path.join(ROOT, "models", f"mpt-{row.model}.yaml")))
    m["max_position_embeddings"] = row.seq
    m.pop("parameters_B", None)          # stated for seq 2048; the row's own count is checked against NumParams
    return m


def model_spec(row: Row):
    from planner.spec.model import parse_model
    return parse_model(model_dict(row), os.path.join(ROOT, "models", f"mpt-{row.model}.yaml"))


def cluster_dict(gpus: int) -> dict:
    c = dict(load_yaml(CLUSTER))
    per = c["gpus_per_node"]
    if gpus % per:
        raise ValueError(f"{gpus} GPUs is not a whole number of {per}-GPU nodes")
    c.update(nodes=gpus // per, name=f"{c['name']}-{gpus}")
    return c


def build(row: Row):
    """(spec, config) of one row, the row's knobs exactly (see the module docstring for the mapping)."""
    from planner.spec import parse_spec
    d = {"name": row.id, "model": model_dict(row), "cluster": cluster_dict(row.gpus),
         "training": {"global_batch_size": row.gbs, "seq_length": row.seq, "precision": "bf16",
                      "attention": "fused"},
         "search": {"schedules": ["1f1b"], "zero": [3]}}
    spec = parse_spec(d, os.path.join(ROOT, "benchmarks", "_llmfoundry_a100.yaml"))
    cfg = ParallelConfig(1, 1, row.gpus, row.mbs, row.accum, "1f1b", 1,
                         "full" if row.checkpointing else "none", 3, False)
    return spec, cfg


# ---- evaluation -------------------------------------------------------------------------------------------------

def fa1_over_fa2(seq: int) -> float:
    """FlashAttention-1 / FlashAttention-2 fwd+bwd rate on A100 (panel d), linear in log2 s, flat outside 512..16k
    as the planner's table is."""
    x = min(max(math.log2(seq), math.log2(FA_SEQ[0])), math.log2(FA_SEQ[-1]))
    for i in range(len(FA_SEQ) - 1):
        a, b = math.log2(FA_SEQ[i]), math.log2(FA_SEQ[i + 1])
        if x <= b:
            w = (x - a) / (b - a)
            f1 = FA1_A100_CAUSAL_D128[i] + w * (FA1_A100_CAUSAL_D128[i + 1] - FA1_A100_CAUSAL_D128[i])
            f2 = FA2_A100_CAUSAL_D128[i] + w * (FA2_A100_CAUSAL_D128[i + 1] - FA2_A100_CAUSAL_D128[i])
            return f1 / f2
    return FA1_A100_CAUSAL_D128[-1] / FA2_A100_CAUSAL_D128[-1]


def attention_share(spec, cfg, costs) -> float:
    """Fused attention's share of one layer's GPU work (forward, recompute, backward) in the planner's model."""
    p = costs.compute.layer_parts(spec.model, spec.cluster, spec.training, cfg)
    fwd = p["gemm"] + p["attn"] + p["elem"]
    rc = fwd if cfg.recompute == "full" else 0.0
    bwd = costs.compute.backward_ratio * p["gemm"] + p["attn_backward"] + p.get("elem_backward", 1.5 * p["elem"])
    attn = p["attn"] * (2 if cfg.recompute == "full" else 1) + p["attn_backward"]
    return attn / (fwd + rc + bwd)


IMPLIED_MIN_SHARE = 0.25      # below it the attention rate is too weakly tied to the row's time to read one off


def implied_attention_tflops(row: Row, spec, cfg, costs) -> float | None:
    """The fused-attention rate (fwd + bwd, causal, TFLOP/s) at which the planner's time equals the row's, all else as
    the planner has it: a reading of the run, not a fit (nothing is changed with it). None outside a 0.05-3x range
    of the charged rate."""
    from planner.costs import costs_with_compute
    from planner.costs.compute import charged_backend, fused_attention_efficiency
    from planner.search.solve import estimate_plan
    target = row.gbs * row.seq / row.tokens_per_s

    def time_at(rate):
        c = costs_with_compute(replace(costs.compute, attention_rate=rate), costs.memory)
        return estimate_plan(spec, cfg, costs=c)[0].iteration_s
    lo, hi = 0.05, 3.0
    if not time_at(hi) <= target <= time_at(lo):
        return None
    for _ in range(40):                 # time falls as the rate grows
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if time_at(mid) > target else (lo, mid)
    eff = fused_attention_efficiency(spec.cluster.gpu.type, row.seq,
                                     backend=charged_backend(spec.cluster.gpu.type, spec.training, cfg))
    return (lo * hi) ** 0.5 * eff * PEAK_TFLOPS


def evaluate(row: Row) -> dict:
    from planner.costs import costs_with_compute, default_costs
    from planner.search.solve import estimate_plan
    spec, cfg = build(row)
    costs = default_costs(spec.cluster)
    est = estimate_plan(spec, cfg, costs=costs)[0]
    tokens = row.gbs * row.seq
    pred = tokens / est.iteration_s / row.gpus
    pub = row.tokens_per_s_per_gpu
    slow = costs_with_compute(replace(costs.compute, attention_rate=fa1_over_fa2(row.seq)), costs.memory)
    fa1 = tokens / estimate_plan(spec, cfg, costs=slow)[0].iteration_s / row.gpus
    why = excluded(row)
    share = attention_share(spec, cfg, costs)
    implied = implied_attention_tflops(row, spec, cfg, costs) if share >= IMPLIED_MIN_SHARE else None
    return {"id": row.id, "model": row.model, "seq": row.seq, "gpus": row.gpus, "params": row.num_params,
            "config": cfg.label(),
            "checkpointing": row.checkpointing, "partial": why is not None, "why": why,
            "published_tps_gpu": pub, "predicted_tps_gpu": pred, "error": pred / pub - 1,
            "published_mfu": row.mfu / 100, "predicted_mfu": foundry_mfu(row, pred * row.gpus),
            "iteration_s": est.iteration_s, "fsdp_exposed_s": est.dp_comm_s,
            "attention_share": share, "implied_attention_tflops": implied,
            "fa1_tps_gpu": fa1, "fa1_error": fa1 / pub - 1,
            "peak_GiB": est.peak_memory_GiB, "fits": est.fits}


SEQ_BANDS = ((0, 2048, "seq <= 2k"), (2049, 8192, "seq 4k-8k"), (8193, 1 << 30, "seq >= 16k"))


def summary(results: list[dict], key: str = "error") -> dict:
    """Over the exact rows: median / max |error|, median signed error, and what the error follows (Spearman with the
    attention share, the sequence length and the model size; the median signed error per sequence band and per
    activation-checkpointing setting)."""
    from planner.costs.metrics import spearman
    full = [r for r in results if not r["partial"]]
    errs = [r[key] for r in full]
    if not errs:
        return {"rows": len(results), "full_rows": 0}

    def med(sel):
        e = [r[key] for r in full if sel(r)]
        return statistics.median(e) if e else None
    return {"rows": len(results), "full_rows": len(full),
            "median_abs": statistics.median(abs(e) for e in errs), "max_abs": max(abs(e) for e in errs),
            "median_signed": statistics.median(errs),
            "optimistic_rows": sum(e > 0 for e in errs), "fits": sum(r["fits"] for r in full),
            "spearman_attention_share": spearman(errs, [r["attention_share"] for r in full]),
            "spearman_seq": spearman(errs, [r["seq"] for r in full]),
            "spearman_params": spearman(errs, [r["params"] for r in full]),
            "median_by_seq": {name: med(lambda r, lo=lo, hi=hi: lo <= r["seq"] <= hi) for lo, hi, name in SEQ_BANDS},
            "median_by_checkpointing": {"AC": med(lambda r: r["checkpointing"]),
                                        "no AC": med(lambda r: not r["checkpointing"])}}


def print_table(results: list[dict]) -> None:
    print(f"source: {SOURCE['repo']} @ {SOURCE['commit'][:12]} {SOURCE['path']}, table \"{SOURCE['table']}\"")
    print(f"{'row':<22} {'config':<36} {'AC':>2} {'pub tok/s/GPU':>13} {'pred':>7} {'error':>7} "
          f"{'MFU pub':>7} {'pred':>6} {'attn':>5} {'FSDP s':>7} {'FA1 what-if':>11} {'impl. TF':>8} {'peak GiB':>8}")
    for r in results:
        flag = "  partial: " + r["why"] if r["partial"] else ""
        implied = "-" if r["implied_attention_tflops"] is None else f"{r['implied_attention_tflops']:.0f}"
        print(f"{r['id']:<22} {r['config'][:36]:<36} {'y' if r['checkpointing'] else 'n':>2} "
              f"{r['published_tps_gpu']:>13.0f} {r['predicted_tps_gpu']:>7.0f} {r['error']:>+7.1%} "
              f"{r['published_mfu']:>7.1%} {r['predicted_mfu']:>6.1%} {r['attention_share']:>5.0%} "
              f"{r['fsdp_exposed_s']:>7.3f} {r['fa1_error']:>+11.1%} {implied:>8} {r['peak_GiB']:>7.1f}"
              f"{'' if r['fits'] else ' NOFIT'}{flag}")
    s, w = summary(results), summary(results, "fa1_error")
    print(f"\nerror = predicted / published tokens/s/GPU - 1 (> 0: the planner is faster than the run). attn: fused "
          "attention's share of the planner's layer GPU time. FA1 what-if: the error with attention at "
          "FlashAttention-1's A100 rate (not the prediction). impl. TF: the attention "
          f"TFLOP/s (fwd + bwd, causal) at which the planner matches the row, all else as it is (rows whose attention "
          f"share is >= {IMPLIED_MIN_SHARE:.0%}); FlashAttention-2's A100 panel: 155-189 at 2k-16k, FlashAttention-1's "
          "69-83.")
    print(f"exact rows: {s['full_rows']} of {s['rows']} (the rest partial, not counted); optimistic: "
          f"{s['optimistic_rows']} of {s['full_rows']}; fit in memory: {s['fits']} of {s['full_rows']}")
    print(f"median |error| {s['median_abs']:.1%}, max |error| {s['max_abs']:.1%}, median signed "
          f"{s['median_signed']:+.1%}")
    print(f"FA1 what-if: median |error| {w['median_abs']:.1%}, max {w['max_abs']:.1%}, median signed "
          f"{w['median_signed']:+.1%}")
    for name, x in (("prediction", s), ("FA1 what-if", w)):
        bands = ", ".join(f"{k} {v:+.1%}" for k, v in {**x["median_by_seq"], **x["median_by_checkpointing"]}.items()
                          if v is not None)
        print(f"{name}: median signed error by group: {bands}; Spearman of the error with the attention share "
              f"{x['spearman_attention_share']:+.2f}, the sequence {x['spearman_seq']:+.2f}, the model size "
              f"{x['spearman_params']:+.2f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rows", default=None, help="comma-separated row ids (default: all)")
    args = ap.parse_args(argv)
    rows = parse_table()
    if args.rows:
        want = args.rows.split(",")
        unknown = set(want) - {r.id for r in rows}
        if unknown:
            ap.error(f"unknown rows {sorted(unknown)}")
        rows = [r for r in rows if r.id in want]
    results = [evaluate(r) for r in rows]
    if args.json:
        print(json.dumps({"source": SOURCE, "rows": results, "summary": summary(results),
                          "fa1_what_if": summary(results, "fa1_error")}, indent=1))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
