#!/usr/bin/env bash
# cost_alpha auto vs online vs a calibrated file (issue 49), C++ `frameshard ab` on the default
# recipe's tower: the four presets at CP 2 and 4, 20 steps each. Prints per run the sharded arm's
# slowest rank over the ideal (the replicated arm's tower time / cp), thread CPU time, over all
# steps and over steps 3 on (after online's 2 warm-up steps).
#
# Usage: bash bench/online_ab.sh [build/frameshard] [out-dir] [steps]
set -eu
BIN=${1:-build/frameshard}
OUT=${2:-build/online_ab}
STEPS=${3:-20}
mkdir -p "$OUT"
FS=--distributed.multimodal.vision.frame_sharding
# The default recipe's tower (qwen3-vl, width 64, depth 2).
"$BIN" calibrate --family qwen3-vl --width 64 --depth 2 --repeats 3 \
  --sizes 16 64 256 1024 4096 --out "$OUT/cal.txt" >/dev/null
for cp in 2 4; do
  for preset in mixed doc video multi; do
    for cost in auto online "$OUT/cal.txt"; do
      "$BIN" ab --json --plot "" --train.steps "$STEPS" --data.preset "$preset" \
        --distributed.cp_size "$cp" "$FS.cost_alpha" "$cost" \
        >"$OUT/${preset}_cp${cp}_$(basename "$cost" .txt).json" 2>/dev/null
    done
  done
done
python3 - "$OUT" <<'PYEOF'
import json, os, statistics, sys
out = sys.argv[1]
print("| preset | CP | auto | online | calibrated | auto, steps 3+ | online, steps 3+ |")
print("|---|---|---|---|---|---|---|")
for cp in (2, 4):
    for preset in ("mixed", "doc", "video", "multi"):
        row, late = {}, {}
        for cost in ("auto", "online", "cal"):
            j = json.load(open(os.path.join(out, "%s_cp%d_%s.json" % (preset, cp, cost))))
            s, r = j["sharded"], j["replicated"]
            row[cost] = j["vision_cpu_time_ratio"] * cp
            ratios = [a / b * cp for a, b in zip(s["vision_cpu_seconds"][2:], r["vision_cpu_seconds"][2:])]
            late[cost] = statistics.mean(ratios)
        print("| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
            preset, cp, row["auto"], row["online"], row["cal"], late["auto"], late["online"]))
PYEOF
