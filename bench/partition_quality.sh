#!/usr/bin/env bash
# Partition quality of every partitioner on the four presets: mean max/mean
# imbalance over seeds 0..N-1 (default 20) at cp 4 and cp 8, default cost
# model (auto = Qwen3-VL FLOPs). "bound" is max(largest unit, mean) / mean:
# no partitioner, contiguous or not, can go below it.
# Usage: bench/partition_quality.sh [path/to/frameshard] [seeds]
set -euo pipefail
exec /usr/bin/python3 - "${1:-build/frameshard}" "${2:-20}" <<'PY'
import json, subprocess, sys
binary, seeds = sys.argv[1], int(sys.argv[2])
names = ("optimal", "greedy", "count", "lpt")
print("| preset | cp | optimal | greedy | count | lpt (permuted) | bound |")
print("|---|---|---|---|---|---|---|")
for preset in ("doc", "multi", "video", "mixed"):
    for cp in (4, 8):
        imb = {n: 0.0 for n in names}
        bound = 0.0
        for seed in range(seeds):
            out = subprocess.run(
                [binary, "plan", "--preset", preset, "--cp", str(cp),
                 "--seed", str(seed), "--json"],
                check=True, capture_output=True, text=True).stdout
            j = json.loads(out)
            for c in j["comparison"]:
                imb[c["partitioner"]] += c["imbalance"] / seeds
            bound += j["lower_bound_cost"] / j["mean_cost"] / seeds
        print("| %s | %d | %s | %.3f |" % (
            preset, cp, " | ".join("%.3f" % imb[n] for n in names), bound))
PY
