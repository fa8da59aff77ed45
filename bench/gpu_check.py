#!/usr/bin/env python3
"""The measuring half of scripts/gpu-check.sh: every step after the build, each bounded.

The lent GPU machine gives a session 15 minutes of device time in all and 10 per command, so
the whole check is one command of at most 8 minutes (room for one rerun). Each step below names
the limit it was designed against and has its own time budget: a step that runs past it is
stopped and recorded as "timeout", a step that would start past --deadline-s is recorded as
"skipped", and the others still run; nothing waits on a step that hangs. Every step prints its
time.

Sections of the JSON (one file, --out DIR/gpu_check.json, with DIR/summary.txt beside it):
  parity       (a) *CudaRanks* (the C++ multi-rank tests on CUDA tensors: the gather, the toy
               tower, the Qwen families whole, split and owner-routed in float64, bfloat16 and
               float32, against the CPU float64 reference) and
               bench/hf_parity.py (frameshard.hf.enable on transformers Qwen2.5-VL / Qwen3-VL
               against the unsharded module), float32 and bfloat16, forward + backward
  tower_speed  (b) bench/tower_speed.py: the C++ towers against transformers' own (sdpa, eager,
               flash attention when installed), same weights and inputs
  calibrate    (e) `frameshard calibrate --check`: a, b, c on this device and how far the FLOP
               model's plans are from the calibrated ones (measured slowest rank)
  rank_shares  (c) frameshard_scale_sim: every rank's share timed alone for the four presets and
               the example manifests at CP 2, 4, 8; optimal, greedy (Automodel), count
               (Megatron), lpt and split, under the FLOP model and the calibrated cost
  split        (d) the same on examples/workloads/one_large_page.json (one 16K-patch page)

--dry-run runs every step on the CPU at toy sizes (CI's check that the script works); without
it the sizes are the GPU's. Both write the same keys.

    python bench/gpu_check.py --build build-gpu --out "$OUT" [--dry-run] [--deadline-s 420]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from gpu_check_summary import summarize  # bench/, beside this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTIONS = ("parity", "tower_speed", "calibrate", "rank_shares", "split")
MANIFESTS = [
    os.path.join(ROOT, "examples", "manifests", m) for m in ("infovqa.jsonl", "llava_video.jsonl", "mantis.jsonl")
]
PAGE = os.path.join(ROOT, "examples", "workloads", "one_large_page.json")

# Sizes. GPU: Qwen3-VL's released tower width (1152) at 4 of its 27 layers (per-frame costs are
# per layer; 4 keep every step inside its budget), the presets at half their sides (float32 a
# quarter), CP 2/4/8.
# Gather and K/V exchange modelled at 100 GB/s per GPU (NVLink-class). Dry run: width 64, one
# layer, sides / 16, CP 2 and 4: a few seconds a step on two cores (the Python steps 20-30 s,
# most of it starting Python, torch and transformers).
SIZES = {
    "gpu": dict(
        device="cuda",
        width=0,
        depth=4,
        scale=2,
        page_scale=1,
        cps=(2, 4, 8),
        repeats=3,
        sizes="64,144,256,576,1024,2304,4096,9216,16384",
        max_patches=65536,
        bandwidth=100,
        tower=["--depth", "4", "--repeats", "5", "--warmup", "2"],
        parity=[],
        fp32_shrink=2,
        budget_scale=1,
    ),
    "dry": dict(
        device="cpu",
        width=64,
        depth=1,
        scale=16,
        page_scale=8,
        cps=(2, 4),
        repeats=1,
        sizes="16,64,256",
        max_patches=2048,
        bandwidth=25,
        tower=[
            "--families",
            "qwen2_vl",
            "--depth",
            "1",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--scale",
            "0.25",
            "--threads",
            "1",
            "--attn",
            "sdpa",
        ],
        parity=["--families", "qwen2_5_vl,qwen3_vl"],
        fp32_shrink=1,
        # The budgets guard against a hang here, not the GPU's timings: CI runs the dry run next
        # to another test on two cores, where a step takes up to twice its quiet time.
        budget_scale=3,
    ),
}
DTYPES = ("bfloat16", "float32")


class Step:
    def __init__(self, section, name, limit, budget_s, argv, json_path=None, parse=None):
        self.section, self.name, self.limit, self.budget_s = section, name, limit, budget_s
        self.argv, self.json_path, self.parse = argv, json_path, parse


def gtest_summary(path):
    """Counts of a --gtest_output=json file: tests, failures, skipped, and the failed names."""
    with open(path) as f:
        j = json.load(f)
    cases = [t for s in j.get("testsuites", []) for t in s.get("testsuite", [])]
    skipped = [t["name"] for t in cases if t.get("result") == "SKIPPED"]
    failed = [t["name"] for t in cases if t.get("failures")]
    return {
        "tests": len(cases),
        "passed": len(cases) - len(skipped) - len(failed),
        "skipped": len(skipped),
        "failed": failed,
    }


def parity_steps(a, sz, out):
    gtest_json = os.path.join(out, "cuda_ranks.json")
    hf_json = os.path.join(out, "hf_parity.json")
    tests = os.path.join(a.build, "tests", "frameshard_dist_tower_tests")
    return [
        Step(
            "parity",
            "cuda_ranks",
            "60 s: the C++ *CudaRanks* tests (gather, toy tower, three tiny Qwen towers x "
            "whole/split/owner x float64/bf16/float32), world 2 and 3 sharing one GPU over Gloo "
            "(NCCL refuses two ranks on one device)",
            60,
            [tests, "--gtest_filter=*CudaRanks*", "--gtest_output=json:" + gtest_json],
            gtest_json,
            gtest_summary,
        ),
        Step(
            "parity",
            "hf",
            "60 s: two Gloo rank processes on one GPU, tiny transformers towers, "
            "2 families x 2 dtypes x whole and split frames",
            60,
            [a.python, os.path.join(ROOT, "bench", "hf_parity.py"), "--device", sz["device"], "--json", hf_json]
            + sz["parity"],
            hf_json,
        ),
    ]


def tower_speed_step(a, sz, out, dt):
    path = os.path.join(out, "tower_speed_%s.json" % dt)
    bench = os.path.join(a.build, "bench", "frameshard_tower_bench")
    argv = [a.python, os.path.join(ROOT, "bench", "tower_speed.py"), "--device", sz["device"], "--dtype", dt]
    return Step(
        "tower_speed",
        dt,
        "60 s per dtype: three families at released widths, 4 layers, median of 5 after 2 warm-ups, "
        "one process (most of it building the transformers models)",
        60,
        argv + ["--bin", bench, "--json", path] + sz["tower"],
        path,
    )


def tower_args(sz):
    cps = [x for c in sz["cps"] for x in ("--cp", str(c))]
    return ["--family", "qwen3-vl", "--width", str(sz["width"]), "--depth", str(sz["depth"]),
            "--device", sz["device"]] + cps  # fmt: skip


def calibrate_step(a, sz, out, dt):
    path = os.path.join(out, "calibrate_%s.json" % dt)
    argv = [os.path.join(a.build, "frameshard"), "calibrate", *tower_args(sz), "--dtype", dt]
    argv += ["--sizes", sz["sizes"], "--repeats", str(sz["repeats"]), "--max-patches", str(sz["max_patches"])]
    argv += ["--out", os.path.join(out, "calibration_%s.txt" % dt), "--json", path]
    return Step(
        "calibrate",
        dt,
        "30 s per dtype: 9 frame sizes x 3 repeats, then the check's plans at CP 2/4/8 on two presets",
        30,
        argv + ["--check", "--preset", "mixed", "--preset", "doc"],
        path,
    )


def share_steps(a, sz, out, dt):
    """rank_shares and split of one dtype. float32 runs at a quarter of the rows on the GPU
    (sz["fp32_shrink"]): its matrix products are several times slower than bfloat16's."""
    shrink = sz["fp32_shrink"] if dt == "float32" else 1
    sim = [os.path.join(a.build, "bench", "frameshard_scale_sim"), *tower_args(sz), "--dtype", dt]
    sim += ["--repeats", str(sz["repeats"]), "--bandwidth-gbps", str(sz["bandwidth"])]
    sim += ["--cost-alpha", os.path.join(out, "calibration_%s.txt" % dt)]
    batches = [x for p in ("mixed", "doc", "video", "multi") for x in ("--preset", p)]
    batches += [x for m in MANIFESTS for x in ("--manifest", m)] + ["--samples", "8"]
    shares, split = (os.path.join(out, "%s_%s.json" % (k, dt)) for k in ("rank_shares", "split"))
    return [
        Step(
            "rank_shares",
            dt,
            "75 s per dtype: 7 batches x 3 CP sizes x 5 arms x 2 costs, every rank's share timed "
            "alone (repeated shares reused)",
            75,
            sim + batches + ["--scale", str(sz["scale"] * shrink), "--json", shares],
            shares,
        ),
        Step(
            "split",
            dt,
            "35 s per dtype: one page of 16,384 patch rows (float32: 4,096) at CP 2/4/8, and "
            "cost_alpha online learned over 6 rounds of its timed shares",
            35,
            sim
            + ["--workload", PAGE, "--scale", str(sz["page_scale"] * shrink), "--online-rounds", "6"]
            + ["--json", split],
            split,
        ),
    ]


def steps(a, sz, out):
    """Every step in the order they run: the most telling first (the deadline skips the last)."""
    st = parity_steps(a, sz, out)
    st += [tower_speed_step(a, sz, out, dt) for dt in DTYPES]
    st += [calibrate_step(a, sz, out, dt) for dt in DTYPES]
    for dt in DTYPES:
        st += share_steps(a, sz, out, dt)
    return st


def scaled(steps_, factor):
    for st in steps_:
        st.budget_s *= factor
    return steps_


def run_step(step, out, remaining):
    """Runs one step within min(its budget, the time left); returns its record."""
    rec = {"name": step.name, "limit": step.limit, "budget_s": step.budget_s, "command": step.argv}
    if remaining < step.budget_s / 3:
        rec.update(status="skipped", seconds=0.0, error="%.0f s left of the deadline" % remaining)
        print("== %s/%s: skipped (%.0f s left)" % (step.section, step.name, remaining), flush=True)
        return rec
    # A calibrated cost only when its calibration was written.
    argv = list(step.argv)
    if "--cost-alpha" in argv:
        i = argv.index("--cost-alpha")
        if not os.path.exists(argv[i + 1]):
            del argv[i : i + 2]
            rec["note"] = "no calibration file: the FLOP model only"
    log = os.path.join(out, "logs", "%s_%s.log" % (step.section, step.name))
    print("== %s/%s (budget %d s; %s)" % (step.section, step.name, step.budget_s, step.limit), flush=True)
    t0 = time.monotonic()
    with open(log, "w") as f:
        try:
            proc = subprocess.run(
                argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, timeout=min(step.budget_s, remaining)
            )
            rec["status"] = "ok" if proc.returncode == 0 else "failed"
            rec["exit_code"] = proc.returncode
        except subprocess.TimeoutExpired:
            rec["status"] = "timeout"
        except OSError as e:
            rec.update(status="failed", error=str(e))
    rec["seconds"] = round(time.monotonic() - t0, 2)
    rec["log"] = os.path.relpath(log, out)
    if step.json_path and os.path.exists(step.json_path):
        try:
            rec["data"] = (step.parse or _load)(step.json_path)
        except (ValueError, KeyError) as e:
            rec.update(status="failed", error="unreadable %s: %s" % (step.json_path, e))
    elif rec["status"] == "ok" and step.json_path:
        rec.update(status="failed", error="wrote no %s" % step.json_path)
    if rec["status"] != "ok":
        with open(log) as f:
            rec["log_tail"] = f.read()[-2000:]
    print("   %s in %.1f s" % (rec["status"], rec["seconds"]), flush=True)
    return rec


def _load(path):
    with open(path) as f:
        return json.load(f)


def machine(python):
    """The versions and the GPU; transformers' version from its metadata (importing it takes
    seconds the steps need)."""
    code = """
import importlib.metadata as m, json, os, torch
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
c = torch.cuda.is_available()
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
                  "transformers": version("transformers"), "frameshard": version("frameshard"),
                  "gpu": torch.cuda.get_device_name(0) if c else None,
                  "gpus": torch.cuda.device_count(), "cpus": os.cpu_count()}))
"""
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout) if proc.returncode == 0 else {"error": proc.stderr[-500:]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="the CMake build directory")
    p.add_argument("--python", default=sys.executable, help="the Python with torch and frameshard")
    p.add_argument("--out", required=True, help="directory for gpu_check.json, summary.txt, logs/")
    p.add_argument("--dry-run", action="store_true", help="the CPU at toy sizes (CI)")
    p.add_argument("--deadline-s", type=float, default=420.0, help="time for all the steps")
    p.add_argument("--only", default="", help="comma-separated sections (default: all)")
    p.add_argument("--prior", help="JSON of the steps before (the build), merged in")
    a = p.parse_args()
    out = os.path.abspath(a.out)
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    mode = "dry" if a.dry_run else "gpu"
    start = time.monotonic()
    result = {"mode": "dry-run" if a.dry_run else "gpu", "machine": machine(a.python), "steps": []}
    result.update({s: {} for s in SECTIONS})
    if a.prior and os.path.exists(a.prior):
        result["build"] = _load(a.prior)
    only = set(filter(None, a.only.split(",")))
    for step in scaled(steps(a, SIZES[mode], out), SIZES[mode]["budget_scale"]):
        if only and step.section not in only:
            continue
        rec = run_step(step, out, a.deadline_s - (time.monotonic() - start))
        result[step.section][step.name] = rec
        result["steps"].append(
            {
                "step": "%s/%s" % (step.section, step.name),
                "status": rec["status"],
                "seconds": rec["seconds"],
                "budget_s": step.budget_s,
            }
        )
    result["seconds"] = round(time.monotonic() - start, 1)
    text = summarize(result)
    with open(os.path.join(out, "gpu_check.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text)
    print(text, end="")
    return 0 if all(s["status"] == "ok" for s in result["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
