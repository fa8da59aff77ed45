"""`python -m frameshard train` with gather "owner" (the merge after the split, hf/_cp_owner.py)
against gather "all": vision time, step time, peak bytes and visual bytes per rank, per family and CP.

    PYTHONPATH=build-py/python-dev .venv/bin/python bench/hf_owner_ab.py \
        [--families qwen2_vl,qwen2_5_vl,qwen3_vl,qwen3_5] [--cps 2,4] [--steps 4] [--json FILE] \
        [-- --data.preset doc --data.scale 1.6 ...]

For every family and CP, two `train` runs of the sharded arm (spawned ranks, the default recipe's
tiny random model and batches; every argument after `--` is passed to both), one per gather, on
the same batches and weights. Per pair: the mean vision and step seconds (the slowest rank, step 0
left out, as `ab` reports them), the largest rank's peak bytes (CPU: the process's VmHWM; CUDA:
max_memory_allocated) and vision peak, the visual bytes the largest rank received per step (mean
over steps; "all": every row of the replica, "owner": the rows of its own chunks), each as
owner / all, and the largest loss difference between the two runs. Runs one after the other, so a
timing is only as quiet as the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

GATHER = "--distributed.multimodal.vision.frame_sharding.gather"


def train(family: str, cp: int, gather: str, steps: int, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "frameshard", "train", "--family", family, "--cp", str(cp), "--steps", str(steps)]
    cmd += ["--json", GATHER, gather, *extra]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise SystemExit("hf_owner_ab: %s failed:\n%s%s" % (" ".join(cmd), p.stdout[-4000:], p.stderr[-4000:]))
    return json.loads(p.stdout)


def _received(arm: dict) -> float:
    """The largest rank's visual bytes received, mean over the steps."""
    steps = arm["visual_bytes_received"]
    return sum(max(step) for step in steps) / len(steps)


def pair(family: str, cp: int, steps: int, extra: list[str]) -> dict:
    arms = {g: train(family, cp, g, steps, extra) for g in ("all", "owner")}
    a, o = arms["all"], arms["owner"]
    figures = {
        "vision_s": (a["mean_vision_seconds"], o["mean_vision_seconds"]),
        "step_s": (a["mean_step_seconds"], o["mean_step_seconds"]),
        "peak_bytes": (a["max_peak_bytes"], o["max_peak_bytes"]),
        "vision_peak_bytes": (a["max_vision_peak_bytes"], o["max_vision_peak_bytes"]),
        "visual_bytes_in": (_received(a), _received(o)),
    }
    out = {k: {"all": v[0], "owner": v[1], "ratio": v[1] / v[0] if v[0] else None} for k, v in figures.items()}
    out["loss_max_abs_diff"] = max(abs(x - y) for x, y in zip(a["losses"], o["losses"], strict=True))
    return out


def _cell(f: dict, scale: float, fmt: str = "%.3g") -> str:
    """One figure as "all/owner (owner / all)"."""
    return ("%s/%s (%.2f)" % (fmt, fmt, f["ratio"] or 0)) % (f["all"] / scale, f["owner"] / scale)


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default="qwen2_vl,qwen2_5_vl,qwen3_vl,qwen3_5")
    parser.add_argument("--cps", default="2,4")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--json", default="", help="also write every figure to this file")
    args = parser.parse_args(argv)
    results = {}
    mib = 2.0**20
    print("%-11s %2s  %-17s %-17s %-21s %-19s %-19s %s" % (
        "family", "cp", "vision s all/own", "step s all/own", "peak MiB all/own", "vision peak MiB",
        "visual KiB in", "loss diff"))  # fmt: skip
    for family in args.families.split(","):
        for cp in (int(c) for c in args.cps.split(",")):
            r = pair(family, cp, args.steps, extra)
            results["%s/cp%d" % (family, cp)] = r

            print(
                "%-11s %2d  %-17s %-17s %-21s %-19s %-19s %.2g"
                % (
                    family,
                    cp,
                    _cell(r["vision_s"], 1),
                    _cell(r["step_s"], 1),
                    _cell(r["peak_bytes"], mib, "%.0f"),
                    _cell(r["vision_peak_bytes"], mib, "%.1f"),
                    _cell(r["visual_bytes_in"], 1024.0, "%.0f"),
                    r["loss_max_abs_diff"],
                ),
                flush=True,
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"extra": extra, "steps": args.steps, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
