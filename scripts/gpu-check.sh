#!/usr/bin/env bash
# The GPU checks, as one short script (see README, "On a GPU machine"):
#   1. build against this machine's CUDA torch into build-gpu/ (reused when
#      it is there);
#   2. the multi-rank parity tests on CUDA tensors (CudaRanks.*): NCCL with a
#      GPU per rank, or two ranks sharing GPU 0 over Gloo when there is one;
#   3. the vision A/B in bfloat16 at a realistic width, sharded against
#      replicated, and the gather alone against the padded all-gather;
#   4. `frameshard ab` (the training job, both arms) on `world` GPUs with
#      NCCL: the default recipe, peak bytes from the CUDA caching allocator.
# Usage: bash scripts/gpu-check.sh            (FRAMESHARD_PYTHON=python3,
#        FRAMESHARD_GPU_WORLD=2, FRAMESHARD_GPU_DEPTH=4 to change)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=${FRAMESHARD_PYTHON:-python3}
world=${FRAMESHARD_GPU_WORLD:-2}
depth=${FRAMESHARD_GPU_DEPTH:-4}
build=build-gpu

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
      "gpus", torch.cuda.device_count())'

# Debian dev packages carried as .debs (scripts/gpu-deps.sh), unpacked aside.
prefix_path=()
if [ -d .gpu-deps ] && ls .gpu-deps/*.deb >/dev/null 2>&1; then
  mkdir -p .gpu-deps/root
  for f in .gpu-deps/*.deb; do dpkg -x "$f" .gpu-deps/root; done
  prefix_path=(-DCMAKE_PREFIX_PATH="$root/.gpu-deps/root/usr"
    -DCMAKE_LIBRARY_PATH="$root/.gpu-deps/root/usr/lib/x86_64-linux-gnu")
  export LD_LIBRARY_PATH="$root/.gpu-deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi

start=$(date +%s)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFRAMESHARD_PYTHON="$python" \
  -DFRAMESHARD_WITH_NCCL=AUTO "${prefix_path[@]}" >"$build.configure.log" 2>&1 ||
  { tail -30 "$build.configure.log"; exit 2; }
grep "frameshard:" "$build.configure.log" || true
cmake --build "$build" -j "$(nproc)" --target frameshard_dist_tower_tests frameshard_vision_ab \
  frameshard_cli
echo "gpu-check: built in $(($(date +%s) - start)) s"

echo "== CUDA parity tests (world 2 and 3 as the tests define)"
"$build/tests/frameshard_dist_tower_tests" --gtest_filter='CudaRanks.*'

echo "== vision A/B, bfloat16, qwen2-vl width 1280, depth $depth, world $world"
"$build/bench/frameshard_vision_ab" --family qwen2-vl --depth "$depth" --preset mixed \
  --scale 1 --world "$world" --device cuda --dtype bfloat16 --repeats 5 --warmup 2

echo "== split frames: one 16k-patch page, qwen2-vl width 1280, depth $depth, world $world"
"$build/bench/frameshard_vision_ab" --family qwen2-vl --depth "$depth" \
  --workload examples/workloads/one_large_page.json --scale 1 --split-frames \
  --world "$world" --device cuda --dtype bfloat16 --repeats 5 --warmup 2

echo "== frameshard ab, NCCL, cp $world, the default recipe at scale 2, 10 steps"
"$build/frameshard" ab --backend nccl --steps 10 --distributed.cp_size "$world" \
  --data.scale 2 --plot "" --json | "$python" -c '
import json, sys
j = json.load(sys.stdin)
keys = ("vision_time_ratio", "step_time_ratio", "peak_bytes_ratio",
        "vision_peak_bytes_ratio", "loss_max_abs_diff")
print(" ".join("%s=%.4g" % (k, j[k]) for k in keys))'
