#!/usr/bin/env bash
# The tower A/B table: frameshard_vision_ab for every reference family x
# preset at CP=2 (2 ranks, one thread each), printed as one Markdown table
# of the sharded / replicated ratios (tower forward+backward, max over
# ranks) and the gather, as in the README's "Performance" section.
# Usage: bash bench/vision_ab_sweep.sh [build dir] [extra frameshard_vision_ab
#        options...]   (default: build --width 256 --depth 2 --scale 8 --dtype float32
#        --repeats 3 --warmup 1)
set -euo pipefail
BUILD=${1:-build}
shift || true
EXTRA=("$@")
if [ ${#EXTRA[@]} -eq 0 ]; then
  EXTRA=(--width 256 --depth 2 --scale 8 --dtype float32 --repeats 3 --warmup 1)
fi
AB=$BUILD/bench/frameshard_vision_ab
[ -x "$AB" ] || { echo "vision_ab_sweep: $AB not built" >&2; exit 2; }
echo "| family | preset | patch rows | replicated ms | sharded ms | sharded / replicated | gather unpadded ms |"
echo "|---|---|---:|---:|---:|---:|---:|"
for family in qwen2-vl qwen2.5-vl qwen3-vl; do
  for preset in mixed doc video multi; do
    line=$("$AB" --family "$family" --preset "$preset" --world 2 "${EXTRA[@]}" |
      sed -n 's/^json: //p')
    python3 - "$line" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
rep, sh = j["replicated"]["median_step_ms"], j["sharded"]["median_step_ms"]
print(f"| {j['family']} | {j['workload'].split()[1]} | {j['patch_rows']} | {rep:.1f} | {sh:.1f} "
      f"| {j['vision_time_ratio']:.3f} | {j['gather_unpadded_ms']:.2f} |")
PY
  done
done
