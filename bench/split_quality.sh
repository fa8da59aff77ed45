#!/usr/bin/env bash
# Split frames: plan quality with and without cutting frames across ranks,
# on the four presets at cp 2 to 64, means over seeds 0..N-1 (default 20),
# default cost model (auto = Qwen3-VL FLOPs), exchange_row_cost (1000),
# split_min_gain (0.05) and split_exchange_latency_us (50 us a layer).
# max/mean is over the whole frames' mean cost (total / cp) in both columns;
# "work+exch" is the split plan's total cost (pieces' work plus their K/V
# exchange) / cp over that mean: the split plan's own floor. The exchange is
# K/V rows received per full-attention layer summed over ranks, and MiB per
# forward for Qwen3-VL (width 1152, bf16 K and V, 27 full layers).
# min_tokens is 0 so every batch is planned on the sharded path (frames are
# cut only there; a few small video seeds would otherwise stay replicated).
# Usage: bench/split_quality.sh [path/to/frameshard] [seeds]
set -euo pipefail
exec /usr/bin/python3 - "${1:-build/frameshard}" "${2:-20}" <<'PY'
import json, subprocess, sys
binary, seeds = sys.argv[1], int(sys.argv[2])
print("| preset | cp | max/mean unsplit | max/mean split | work+exch | pieces "
      "| exchange rows/layer | exchange MiB |")
print("|---|---|---|---|---|---|---|---|")
for preset in ("mixed", "doc", "video", "multi"):
    for cp in (2, 4, 8, 16, 32, 64):
        acc = dict(unsplit=0.0, split=0.0, floor=0.0, pieces=0.0, rows=0.0,
                   mib=0.0)
        for seed in range(seeds):
            out = subprocess.run(
                [binary, "plan", "--preset", preset, "--cp", str(cp),
                 "--seed", str(seed), "--split-frames", "--json",
                 "--distributed.multimodal.vision.frame_sharding.min_tokens",
                 "0"],
                check=True, capture_output=True, text=True).stdout
            j = json.loads(out)
            mean = j["frames_mean_cost"]
            acc["unsplit"] += j["unsplit_max_cost"] / mean
            acc["split"] += j["max_cost"] / mean
            acc["floor"] += j["mean_cost"] / mean
            acc["pieces"] += sum(len(r["pieces"]) for r in j["ranks"])
            acc["rows"] += j["exchange_rows"]
            acc["mib"] += j["exchange_mib"]
        a = {k: v / seeds for k, v in acc.items()}
        print("| %s | %d | %.3f | %.3f | %.3f | %.1f | %s | %s |" % (
            preset, cp, a["unsplit"], a["split"], a["floor"], a["pieces"],
            format(round(a["rows"]), ","), format(round(a["mib"]), ",")))
PY
