#!/usr/bin/env bash
# The GPU check: one command for the lent GPU machine (docs/building.md, "GPU check").
#
# Designed against that machine (the device tool's docs): one H200, 16 cores, Python 3.12 with
# torch 2.11 and transformers 5.17.0, no network, at most 64 MiB carried, 15 minutes of device
# time per session (start, transfers, every rerun) and 10 per command. So the whole check is
# one command of at most 8 minutes (one rerun still fits), and every step names its limit and
# prints its time:
#   1. deps     .gpu-deps/*.deb unpacked aside and .whl/*.whl installed (no network: both
#               carried, made by scripts/gpu-deps.sh, 3 MB of the 64 MiB)
#   2. build    the C++ targets the check runs, against the machine's own torch, unity build,
#               Ninja on every core; at the same time `pip install --no-build-isolation .`
#               (the Python package, the surface users adopt), half the cores each
#   3. measure  bench/gpu_check.py: parity, tower_speed, calibrate, rank_shares, split, each
#               step with its own budget, the rest of the 8 minutes as their deadline
# Results: $OUT/gpu_check.json and $OUT/summary.txt ($OUT: set by the device tool; else
# ./gpu-check-out), logs under $OUT/logs.
#
# FRAMESHARD_GPU_DRYRUN=1 runs step 3 on the CPU at toy sizes with an existing build (CI's cli
# tier: the same JSON keys; 90 s on two quiet cores, each step's budget tripled and 300 s in all
# against CI's load), skipping 1 and 2. FRAMESHARD_GPU_DRYRUN=build runs
# 1 and 2 as on the GPU machine, then 3 at toy sizes: the build path checked on any machine (e.g.
# under scripts/without-debian-deps.sh, as the GPU machine lacks those packages).
#
# Usage: bash scripts/gpu-check.sh
#   FRAMESHARD_PYTHON   the Python with torch (GPU: python3; dry run: .venv/bin/python)
#   FRAMESHARD_GPU_BUILD the build directory (GPU: build-gpu; dry run: build)
#   FRAMESHARD_GPU_LIMIT_S the whole command's limit (480)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dry=${FRAMESHARD_GPU_DRYRUN:-0}
limit=${FRAMESHARD_GPU_LIMIT_S:-480}
out=${OUT:-$root/gpu-check-out}
mkdir -p "$out/logs"
start=$(date +%s)
times="$out/logs/build_times.json"
echo "{}" >"$times"

elapsed() { echo $(($(date +%s) - start)); }
# record NAME SECONDS: one figure of the build steps, for the JSON.
record() {
  "$python" - "$times" "$1" "$2" <<'EOF'
import json, sys
p, k, v = sys.argv[1], sys.argv[2], float(sys.argv[3])
d = json.load(open(p)); d[k] = v; json.dump(d, open(p, "w"))
EOF
}

if [ "$dry" = 1 ]; then
  python=${FRAMESHARD_PYTHON:-$root/.venv/bin/python}
  build=${FRAMESHARD_GPU_BUILD:-$root/build}
  for t in frameshard bench/frameshard_scale_sim bench/frameshard_tower_bench \
    tests/frameshard_dist_tower_tests; do
    [ -x "$build/$t" ] || { echo "gpu-check: dry run: expected $build/$t (build first), got none" >&2; exit 2; }
  done
  echo "gpu-check: dry run on the CPU at toy sizes, build $build, python $python"
  exec "$python" bench/gpu_check.py --dry-run --build "$build" --python "$python" --out "$out" \
    --deadline-s 300
fi

python=${FRAMESHARD_PYTHON:-python3}
build=${FRAMESHARD_GPU_BUILD:-$root/build-gpu}
jobs=$(nproc)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

# 1. deps. Limit: no network and 64 MiB carried, so everything arrives as files of this tree.
t=$(date +%s)
prefix=()
cpath=${CPATH:-}
if ls .gpu-deps/*.deb >/dev/null 2>&1; then
  deps=${TMPDIR:-/tmp}/frameshard-gpu-deps
  mkdir -p "$deps"
  for f in .gpu-deps/*.deb; do dpkg -x "$f" "$deps"; done
  usr=$deps/usr
  prefix=(-DCMAKE_PREFIX_PATH="$usr" -DCMAKE_LIBRARY_PATH="$usr/lib/x86_64-linux-gnu")
  # gloo's headers (the C++ Gloo groups) are found by include path, not by a package config;
  # only the C++ build gets it (the pip build uses its own yaml-cpp 0.8 from the wheel, and
  # Debian's 0.7 headers must not shadow it there).
  cpath="$usr/include${cpath:+:$cpath}"
  export LD_LIBRARY_PATH="$usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if ls .whl/*.whl >/dev/null 2>&1; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl ||
    echo "gpu-check: the carried wheels did not install; the package build may fail"
fi
record deps_s $(($(date +%s) - t))
echo "gpu-check: deps in $(($(date +%s) - t)) s (limit: no network, 64 MiB carried)"

# 2. build. Limit: a few minutes on 16 cores, so only the four targets the check runs, in
# unity batches, and the extension beside them.
t=$(date +%s)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
CPATH=$cpath cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DFRAMESHARD_PYTHON="$python" \
  -DFRAMESHARD_UNITY=ON -DFRAMESHARD_WITH_NCCL=AUTO "${prefix[@]}" >"$out/logs/configure.log" 2>&1
configure_rc=$?
# A failed configure is reported, and the Python package and its steps still run.
[ $configure_rc = 0 ] || tail -30 "$out/logs/configure.log"
grep "frameshard:" "$out/logs/configure.log"
record configure_s $(($(date +%s) - t))
t=$(date +%s)
(
  p0=$(date +%s)
  CMAKE_BUILD_PARALLEL_LEVEL=$((jobs / 2)) "$python" -m pip install -q --no-build-isolation --no-deps \
    -C build-dir="$build-py" . >"$out/logs/pip_install.log" 2>&1
  rc=$?
  echo $(($(date +%s) - p0)) >"$out/logs/pip_s"
  exit $rc
) &
pip_pid=$!
build_rc=$configure_rc
[ $configure_rc = 0 ] && {
  CPATH=$cpath cmake --build "$build" -j "$((jobs - jobs / 2))" --target frameshard_cli \
    frameshard_scale_sim frameshard_tower_bench frameshard_dist_tower_tests >"$out/logs/build.log" 2>&1
  build_rc=$?
}
record build_cpp_s $(($(date +%s) - t))
echo "gpu-check: C++ targets built in $(($(date +%s) - t)) s (exit $build_rc; limit: a few minutes on $jobs cores)"
wait $pip_pid
pip_rc=$?
record build_pip_s "$(cat "$out/logs/pip_s" 2>/dev/null || echo -1)"
record build_cpp_and_pip_s $(($(date +%s) - t))
echo "gpu-check: C++ targets and the Python package in $(($(date +%s) - t)) s (pip exit $pip_rc)"
[ $build_rc = 0 ] || tail -40 "$out/logs/build.log" 2>/dev/null
[ $pip_rc = 0 ] || tail -40 "$out/logs/pip_install.log"

# 3. measure, in what is left of the limit (15 s kept for writing the results).
left=$((limit - $(elapsed) - 15))
echo "gpu-check: measuring, deadline $left s"
toy=()
[ "$dry" = build ] && toy=(--dry-run)
"$python" bench/gpu_check.py "${toy[@]}" --build "$build" --python "$python" --out "$out" \
  --deadline-s "$left" --prior "$times"
rc=$?
echo "gpu-check: done in $(elapsed) s (limit $limit s)"
[ $build_rc = 0 ] && [ $pip_rc = 0 ] && exit $rc
exit 3
