#!/usr/bin/env bash
# Profile this machine's GPU for the planner: layer compute times over a grid of Megatron-like shapes
# (hidden/heads = 128, tensor-parallel shards 1-8) and real CUDA peak-memory samples of pipeline stages.
# Usage: bash benchmarks/profile_gpu.sh OUTDIR [MEMORY_SECONDS]
# Then, on any machine:  planner fit compute --profile OUTDIR/compute.csv --cluster CLUSTER.yaml -o PROFILE.json
#   (benchmarks/make_h100_profile.py is how the shipped H100 profile was made from such a file), and
#   score the memory estimator on OUTDIR/memory_cuda.csv as docs/notes/memory.md does; on the GPU,
#   python benchmarks/memory_cuda_capped.py OUTDIR/memory_cuda.csv -o capped.csv measures fragmentation.
set -euo pipefail
out=${1:?usage: profile_gpu.sh OUTDIR [MEMORY_SECONDS]}
mem_s=${2:-300}
mkdir -p "$out"
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$out/gpu.txt"
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$out/gpu.txt"
"$py" -m planner profile compute --device cuda --precision bf16 --hidden 2048,4096,6144,8192,12288 --head-dim 128 \
    --seq 1024,2048 --micro-batch 1,2,4 --tp 1,2,4,8 --repeats 5 -o "$out/compute.csv"
"$py" -m planner profile memory --device cuda -n 400 --seed 7 --time-budget "$mem_s" --json \
    -o "$out/memory_cuda.csv" | tee "$out/memory_summary.json"
