#!/usr/bin/env bash
# Profile this machine's GPU for the planner: layer compute times over a grid of Megatron-like shapes
# (hidden/heads = 128, tensor-parallel shards 1-8) and real CUDA peak-memory samples of pipeline stages.
# Usage: bash benchmarks/profile_gpu.sh OUTDIR [MEMORY_SECONDS]
# Then, on any machine:  planner fit compute --profile OUTDIR/compute.csv --cluster CLUSTER.yaml -o PROFILE.json
#                        python benchmarks/memory_cuda.py OUTDIR/memory_cuda.csv
set -euo pipefail
out=${1:?usage: profile_gpu.sh OUTDIR [MEMORY_SECONDS]}
mem_s=${2:-300}
mkdir -p "$out"
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$out/gpu.txt"
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$out/gpu.txt"
tmp=$(mktemp -d)
first=1
for hh in 2048:16 4096:32 6144:48 8192:64 12288:96; do
  h=${hh%%:*}; a=${hh##*:}
  "$py" -m planner profile compute --device cuda --precision bf16 --hidden "$h" --heads "$a" \
      --seq 1024,2048 --micro-batch 1,2,4 --tp 1,2,4,8 --repeats 5 -o "$tmp/c_$h.csv"
  if [ $first = 1 ]; then cat "$tmp/c_$h.csv"; first=0; else tail -n +2 "$tmp/c_$h.csv"; fi >> "$tmp/compute.csv"
done
mv "$tmp/compute.csv" "$out/compute.csv"
"$py" -m planner profile memory --device cuda -n 400 --seed 7 --time-budget "$mem_s" --json \
    -o "$out/memory_cuda.csv" | tee "$out/memory_summary.json"
