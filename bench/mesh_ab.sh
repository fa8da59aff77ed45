#!/usr/bin/env bash
# The mesh's per-step choice, measured (issue 37): `frameshard ab`, 30 steps,
# on the straggler recipe, `multi` and `mixed` at DP 2 x CP 1 and DP 2 x CP 2,
# and two dataset manifests (llava_video, infovqa) at DP 2 x CP 1. Every run
# takes policy auto with a cost file calibrated here (`frameshard calibrate`
# of the recipes' tower) and a route model of Gloo on loopback, and
# prints per run: the slowest rank's tower time per step (thread CPU time,
# the figure to read when ranks share cores, and its wall-time ratio), the
# step time ratio, the replica gap and the steps the mesh took.
#
# At CP 1 the ab's replicated arm IS the CP-only job (each rank encodes its
# own replica); at CP 2 the CP-only job is a second ab with mesh_dims [cp]
# (its sharded arm). The ratios compare the [dp, cp] sharded arm with it.
#
# Usage: bash bench/mesh_ab.sh [build/frameshard] [out-dir] [steps]
set -eu
BIN=${1:-build/frameshard}
OUT=${2:-build/mesh_ab}
STEPS=${3:-30}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
FS=--distributed.multimodal.vision.frame_sharding

"$BIN" calibrate --family qwen3-vl --width 64 --depth 2 --repeats 3 \
  --sizes 16 64 256 1024 4096 --out "$OUT/cal.txt" >/dev/null
for m in llava_video infovqa; do
  "$BIN" analyze "$ROOT/examples/manifests/$m.jsonl" --family qwen3-vl \
    --emit-grids >"$OUT/$m.jsonl"
done
# 860 us: one exchange forward + backward between two Gloo ranks on this
# machine's loopback (frameshard.calibrate_exchange(clock="wall") under
# torchrun --nproc-per-node 2); 2 GB/s: a conservative loopback bandwidth.
AUTO=("$FS.policy" auto "$FS.cost_alpha" "$OUT/cal.txt"
  "$FS.gather_bandwidth_gbps" 2 "$FS.split_exchange_latency_us" 860)

ab() {  # NAME RECIPE ARGS...
  local name=$1 recipe=$2
  shift 2
  echo "== $name" >&2
  (cd "$ROOT" && "$BIN" ab "$recipe" --train.steps "$STEPS" --json --plot "" \
    "$@") >"$OUT/$name.json"
}

PAGES=examples/recipes/mesh_dp2_cp1_pages_or_text.yaml
MULTI=examples/recipes/mesh_dp2_cp1_multi.yaml
ab straggler "$PAGES" "${AUTO[@]}"
ab straggler_threshold "$PAGES"
for preset in multi mixed; do
  ab "${preset}_cp1" "$MULTI" --data.preset "$preset" "${AUTO[@]}"
  ab "${preset}_cp1_threshold" "$MULTI" --data.preset "$preset"
  ab "${preset}_cp2" "$MULTI" --data.preset "$preset" \
    --distributed.cp_size 2 "${AUTO[@]}"
  ab "${preset}_cp2_cponly" "$MULTI" --data.preset "$preset" \
    --distributed.cp_size 2 "$FS.mesh_dims" '[cp]' "${AUTO[@]}"
done
for m in llava_video infovqa; do
  ab "${m}_cp1" "$MULTI" --data.manifest "$OUT/$m.jsonl" --data.scale 4 \
    --data.samples_per_step 2 "${AUTO[@]}"
done

python3 - "$OUT" <<'PYEOF'
import json, os, sys
out = sys.argv[1]
def load(n):
    return json.load(open(os.path.join(out, n + ".json")))
def arm(j, k):
    a = j[k]
    return a["mean_vision_seconds"], a["mean_vision_cpu_seconds"], a["mean_step_seconds"], a["mean_replica_gap_cpu_seconds"], a
rows = []
def row(name, mesh_j, base_j, base_key):
    v, c, s, g, a = arm(mesh_j, "sharded")
    bv, bc, bs, bg, _ = arm(base_j, base_key)
    on = "%d/%d" % (a["mesh_steps"], a["mesh_steps"] + a["cp_only_steps"])
    rows.append((name, bc, c, c / bc, v / bv, s / bs, bg, g, on, mesh_j["loss_max_abs_diff"]))
row("straggler 2x1", load("straggler"), load("straggler"), "replicated")
row("straggler 2x1, threshold (always pooled)", load("straggler_threshold"), load("straggler_threshold"), "replicated")
for p in ("multi", "mixed"):
    row(p + " 2x1", load(p + "_cp1"), load(p + "_cp1"), "replicated")
    row(p + " 2x1, threshold (always pooled)", load(p + "_cp1_threshold"), load(p + "_cp1_threshold"), "replicated")
    row(p + " 2x2", load(p + "_cp2"), load(p + "_cp2_cponly"), "sharded")
for m in ("llava_video", "infovqa"):
    row(m + " 2x1", load(m + "_cp1"), load(m + "_cp1"), "replicated")
print("| run (DP x CP) | vision CPU s, CP-only | vision CPU s, [dp, cp] | CPU ratio | wall ratio | step ratio "
      "| replica gap CPU s, CP-only -> [dp, cp] | steps on the mesh | loss diff |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f -> %.3f | %s | %.1e |" % r)
PYEOF
