#!/usr/bin/env python3
"""Vision A/B on a transformers tower: frameshard.hf.enable against the replicated tower and the
peers' partition rules, same tower, batch, group and process.

Starts --cp Gloo rank processes (one torch thread each). Every rank builds the same random
transformers vision module (--family, --width, --depth), the same batch (a C++ core preset,
scaled down for a CPU, or a workload JSON file), and times the vision forward + backward
(loss: a rank-specific weighted sum of the outputs) under each arm, the arms interleaved and
repeated so that drift hits them alike:

  replicated  every rank runs the tower on every frame (frameshard off)
  frameshard  hf.enable, partitioner optimal, cost_alpha auto: the wrapped tower's own FLOP model
  calibrated  the same with cost_alpha = a calibration of this tower on this machine
              (frameshard.calibrate on rank 0 before the timed runs: per-frame constants, which
              the FLOP model does not see, are in it)
  preset      the same with the released tower's cost (tower preset of the family): the planner
              before it read the wrapped module (issue 21's starting point)
  greedy      NeMo Automodel's rule: prefix-sum cut (bisect_right) of p * (p + 3 * hidden)
  count       Megatron's rule: equal frame counts, the remainder on the last rank
  split       (--split) frameshard with split_frames: pieces of large frames on several ranks
              (frameshard.hf._split patches the transformers tower's full-attention blocks)
  split-calibrated  split_frames with the calibrated arm's cost (what the FLOP model leaves
              out, the per-frame constants, then weighs the pieces against the whole frames)
              and the exchange latency frameshard.calibrate_exchange measures on the group
              (CPU clock, like the calibration), which a cut must pay per full-attention layer
  online      cost_alpha "online": the FLOP model for the first calls, then a fit of the arm's
              own tower times (no calibration step); split-online the same with split_frames.
              Their calls include the warm-up: each call's slowest rank is printed (the curve)

Per arm and repeat the slowest rank's process CPU seconds (ranks share the machine's cores:
CPU time is the work a rank does) and wall seconds; the median over repeats; ratios to
replicated and to frameshard; the ideal (replicated / cp). Apart, for each sharded arm: the
slowest rank over the mean rank (the plan's balance, what its cost model decides) and the mean
rank over the ideal (the work every rank does that no plan removes: the tower's per-call constant,
the collectives, the split's exchanges). Noise: the spread (max/min) of each
arm's repeats is printed next to it.

    .venv/bin/python bench/hf_vision_ab.py --family qwen3_vl --width 256 --depth 4 \\
        --presets mixed,doc,video,multi --scale 8 --cp 2 --repeats 5 [--json out.json]

Needs the frameshard package (pip install, or PYTHONPATH=build/python-dev after
scripts/python-dev.sh) and the venv's transformers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ARMS_ALL = (
    "replicated", "frameshard", "calibrated", "preset", "greedy", "count", "split", "split-calibrated",
    "online", "split-online",
)  # fmt: skip


def arm_config(arm, family_preset, calibration=None, latency_us=None):
    import frameshard

    base = dict(enabled=True, min_tokens=0, min_frames=0)
    if arm == "frameshard":
        return frameshard.FrameShardingConfig(**base)
    if arm == "calibrated":
        return frameshard.FrameShardingConfig(**base, cost_alpha=calibration)
    if arm == "preset":
        # The planner as it was: the released tower's FLOPs, whatever module it wraps.
        return frameshard.FrameShardingConfig(**base, cost_alpha=family_preset)
    if arm == "greedy":
        return frameshard.FrameShardingConfig(**base, partitioner="greedy", cost_alpha="automodel")
    if arm == "count":
        return frameshard.FrameShardingConfig(**base, partitioner="count", min_local_patch_rows=0)
    if arm == "split":
        # The Python towers take pieces (frameshard.hf._split): a frame larger than a rank's share
        # is cut, each piece attending to its whole frame's K/V (one exchange per layer).
        return frameshard.FrameShardingConfig(**base, split_frames=True)
    if arm == "online":
        return frameshard.FrameShardingConfig(**base, cost_alpha="online")
    if arm == "split-online":
        return frameshard.FrameShardingConfig(**base, split_frames=True, cost_alpha="online")
    if arm == "split-calibrated":
        return frameshard.FrameShardingConfig(
            **base, split_frames=True, cost_alpha=calibration, split_exchange_latency_us=latency_us
        )
    raise ValueError(arm)


PRESET_OF_FAMILY = {
    "qwen2_vl": "qwen2-vl",
    "qwen2_5_vl": "qwen2.5-vl",
    "qwen3_vl": "qwen3-vl",
    "qwen3_vl_moe": "qwen3-vl",
    "qwen3_5": "qwen3.5",
    "qwen3_5_moe": "qwen3.5",
}


def batch_grid(preset, seed, scale):
    """The grid of a preset, a workload JSON file, or an inline "grid:[[t, h, w], ...]" (used as
    written: no scaling)."""
    import frameshard

    if preset.startswith("grid:"):
        return [tuple(int(x) for x in g) for g in json.loads(preset[len("grid:") :])]
    if "+" in preset:
        # "<preset>+<share>": the preset's frames, then one square-ish image of about `share` of
        # all the rows (sides even: whole merged tokens).
        name, share = preset.split("+")
        grid = list(frameshard.workload(name, seed=seed, scale=scale))
        rows = sum(t * h * w for t, h, w in grid) * float(share) / (1.0 - float(share))
        side = max(2, int(round(rows**0.5 / 2)) * 2)
        return grid + [(1, side, max(2, int(round(rows / side / 2)) * 2))]
    return frameshard.workload(preset, seed=seed, scale=scale)


def split_presets(text):
    """Comma-separated presets; commas inside an inline grid's brackets do not separate."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in out + [cur] if p]


def worker(args):
    import torch
    import torch.distributed as dist

    import frameshard
    from frameshard import hf
    from frameshard.hf import _random as hf_towers

    torch.set_num_threads(1)
    store = dist.FileStore(args.store, args.cp)
    dist.init_process_group(
        "gloo", store=store, rank=args.rank, world_size=args.cp, timeout=datetime.timedelta(seconds=600)
    )
    visual = hf_towers.vision_module(args.family, args.width, args.depth, attn=args.attn)
    c = visual.config
    features = c.in_channels * c.temporal_patch_size * c.patch_size**2
    calibration = os.path.join(os.path.dirname(args.store), "calibration.txt")
    if any(arm.endswith("calibrated") for arm in args.arms):
        # One calibration for every rank: ranks that planned with different costs would disagree.
        if args.rank == 0:
            frameshard.calibrate(visual, calibration, sizes=args.calibration_sizes, repeats=3)
        dist.barrier()
    latency_us = None
    if "split-calibrated" in args.arms:
        # Collective: every rank gets the same figure (the slowest rank's).
        latency_us = frameshard.calibrate_exchange(dist.group.WORLD, clock="cpu")
    results = {"exchange_latency_us": latency_us}
    for preset in args.presets:
        grid = batch_grid(preset, args.seed, args.scale)
        grid_t = torch.tensor([list(g) for g in grid], dtype=torch.int64)
        rows = int(grid_t.prod(-1).sum())
        gen = torch.Generator().manual_seed(args.seed)
        pv = torch.randn(rows, features, generator=gen)
        weights = {}
        times = {arm: [] for arm in args.arms}
        curve = {arm: [] for arm in args.arms}  # every call's, warm-up included
        plans = {}
        for rep in range(args.warmup + args.repeats):
            for arm in args.arms:
                if arm == "replicated":
                    hf.disable(visual)
                else:
                    hf.enable(
                        visual,
                        dist.group.WORLD,
                        arm_config(arm, PRESET_OF_FAMILY[args.family], calibration, latency_us),
                    )
                visual.zero_grad(set_to_none=True)
                dist.barrier()
                profile = None
                if args.profile and rep == args.warmup + args.repeats - 1:
                    profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                    profile.__enter__()
                cpu0, wall0 = time.process_time(), time.perf_counter()
                out = visual(pv, grid_thw=grid_t)
                outs = [out.pooler_output] + list(getattr(out, "deepstack_features", None) or [])
                loss = 0.0
                for i, o in enumerate(outs):
                    if i not in weights:
                        g = torch.Generator().manual_seed(1000 * i + args.rank)
                        weights[i] = torch.randn(o.shape, generator=g)
                    loss = loss + (weights[i] * o).sum()
                loss.backward()
                cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
                if profile is not None:
                    profile.__exit__(None, None, None)
                    name = "%s-%s-rank%d.txt" % (preset.replace("/", "_"), arm, args.rank)
                    with open(os.path.join(args.profile, name), "w") as f:
                        f.write(profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=200))
                curve[arm].append(cpu)
                if rep >= args.warmup:
                    times[arm].append((cpu, wall))
                if arm != "replicated" and arm not in plans:
                    p = frameshard.plan(
                        grid,
                        args.cp,
                        arm_config(arm, PRESET_OF_FAMILY[args.family], calibration, latency_us),
                        tower=visual,
                        spatial_merge_size=c.spatial_merge_size,
                    )
                    plans[arm] = {
                        "cost_model": p.cost_model,
                        "path": p.path,
                        "split": p.split,
                        "rank_patch_rows": [r.local_patch_rows for r in p.ranks],
                    }
        hf.disable(visual)
        for arm in args.arms:
            if arm.endswith("online"):
                # One online arm a run (main): hf.enable keeps one model per module.
                (state,) = frameshard.online_costs().values()
                plans[arm].update(cost_model=state.fit, rank_patch_rows=state.rank_patch_rows)
        frameshard._online._STATES.clear()  # the next preset learns afresh
        results[preset] = {
            "grid": [list(g) for g in grid], "patch_rows": rows, "times": times, "plans": plans, "curve": curve,
        }  # fmt: skip
    gathered = [None] * args.cp
    dist.all_gather_object(gathered, results)
    if args.rank == 0:
        with open(args.out, "w") as f:
            json.dump(gathered, f)
    frameshard.shut_down()


def summarize(args, per_rank):
    report = {
        "family": args.family,
        "width": args.width,
        "depth": args.depth,
        "cp": args.cp,
        "scale": args.scale,
        "seed": args.seed,
        "repeats": args.repeats,
        "exchange_latency_us": per_rank[0]["exchange_latency_us"],
        "presets": {},
    }
    for preset in args.presets:
        first = per_rank[0][preset]
        arms = {}
        for arm in args.arms:
            reps = len(first["times"][arm])
            slow_cpu = [max(r[preset]["times"][arm][i][0] for r in per_rank) for i in range(reps)]
            slow_wall = [max(r[preset]["times"][arm][i][1] for r in per_rank) for i in range(reps)]
            # Per repeat: the slowest rank over the mean rank, the plan's balance (what a cost
            # model decides), apart from the work every rank does (what no plan removes).
            cpu = [[r[preset]["times"][arm][i][0] for r in per_rank] for i in range(reps)]
            mean_cpu = [sum(c) / len(c) for c in cpu]
            arms[arm] = {
                "slowest_rank_cpu_s": statistics.median(slow_cpu),
                "slowest_rank_wall_s": statistics.median(slow_wall),
                "cpu_spread": max(slow_cpu) / min(slow_cpu),
                "mean_rank_cpu_s": statistics.median(mean_cpu),
                "slowest_over_mean": statistics.median(max(c) / m for c, m in zip(cpu, mean_cpu, strict=True)),
                "per_rank_cpu_s": [statistics.median(t[0] for t in r[preset]["times"][arm]) for r in per_rank],
                "plan": first["plans"].get(arm),
                "curve_cpu_s": [
                    max(r[preset]["curve"][arm][i] for r in per_rank) for i in range(len(first["curve"][arm]))
                ],
            }
        rep = arms["replicated"]["slowest_rank_cpu_s"] if "replicated" in arms else None
        fs = arms["frameshard"]["slowest_rank_cpu_s"] if "frameshard" in arms else None
        for a in arms.values():
            a["vs_replicated"] = a["slowest_rank_cpu_s"] / rep if rep else None
            a["vs_frameshard"] = a["slowest_rank_cpu_s"] / fs if fs else None
            a["vs_ideal"] = a["slowest_rank_cpu_s"] / (rep / args.cp) if rep else None
            a["mean_vs_ideal"] = a["mean_rank_cpu_s"] / (rep / args.cp) if rep else None
            a["curve_vs_ideal"] = [c / (rep / args.cp) for c in a["curve_cpu_s"]] if rep else None
        report["presets"][preset] = {
            "patch_rows": first["patch_rows"],
            "frames": sum(g[0] for g in first["grid"]),
            "largest_frame_rows": max(g[1] * g[2] for g in first["grid"]),
            "arms": arms,
        }
    return report


def print_report(report):
    print(
        "hf_vision_ab: %s width %d depth %d, CP %d, scale %d, seed %d, median of %d (slowest rank, process CPU s)"
        % (
            report["family"],
            report["width"],
            report["depth"],
            report["cp"],
            report["scale"],
            report["seed"],
            report["repeats"],
        )
    )
    if report["exchange_latency_us"] is not None:
        print(
            "  exchange latency (frameshard.calibrate_exchange, CPU clock): %.0f us per full-attention layer"
            % report["exchange_latency_us"]
        )
    for preset, p in report["presets"].items():
        print(
            "  %s: %d patch rows in %d frames (largest %d)"
            % (preset, p["patch_rows"], p["frames"], p["largest_frame_rows"])
        )
        for arm, a in p["arms"].items():
            print(
                "    %-16s cpu %7.3f s  wall %7.3f s  spread %.2f  /replicated %s  /frameshard %s  /ideal %s"
                % (
                    arm,
                    a["slowest_rank_cpu_s"],
                    a["slowest_rank_wall_s"],
                    a["cpu_spread"],
                    "%.3f" % a["vs_replicated"] if a["vs_replicated"] else "-",
                    "%.3f" % a["vs_frameshard"] if a["vs_frameshard"] else "-",
                    "%.3f" % a["vs_ideal"] if a["vs_ideal"] else "-",
                )
            )
            if arm != "replicated":
                print(
                    "      balance: slowest / mean rank %.3f; mean rank / ideal %s"
                    % (a["slowest_over_mean"], "%.3f" % a["mean_vs_ideal"] if a["mean_vs_ideal"] else "-")
                )
            if arm.endswith("online") and a["curve_vs_ideal"]:
                print("      calls /ideal: %s" % " ".join("%.2f" % c for c in a["curve_vs_ideal"]))
                print("      fit: %s" % (a["plan"] or {}).get("cost_model"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen3_vl")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument(
        "--presets",
        default="mixed,doc,video,multi",
        help="comma-separated C++ presets (<preset>+0.4: with one more image of 40%% of the rows), "
        "workload JSON files or grid:[[t,h,w],...]",
    )
    ap.add_argument("--scale", type=int, default=8, help="divide every frame's h and w by this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cp", type=int, default=2)
    ap.add_argument("--arms", default="replicated,frameshard,calibrated,preset,greedy,count")
    ap.add_argument(
        "--calibration-sizes",
        default="16,64,144,256,576,1024,2304",
        help="patch rows per frame of the calibrated arm's sweep",
    )
    ap.add_argument("--split", action="store_true", help="add the split_frames arm")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", help="write the report here")
    ap.add_argument(
        "--profile", help="write each arm's last call's torch.profiler table (self CPU) per rank into this directory"
    )
    # worker mode (internal)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.presets = split_presets(args.presets)
    args.calibration_sizes = [int(x) for x in args.calibration_sizes.split(",") if x]
    args.arms = [a for a in args.arms.split(",") if a] + (["split"] if args.split else [])
    unknown = [a for a in args.arms if a not in ARMS_ALL]
    if "online" in args.arms and "split-online" in args.arms:
        ap.error("--arms: expected one of online and split-online (hf.enable keeps one model per module), got both")
    if unknown:
        ap.error("--arms: expected some of %s, got %s" % (",".join(ARMS_ALL), ",".join(unknown)))
    if args.worker:
        return worker(args)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        argv = [a for a in sys.argv[1:] if a != "--split"]
        if args.split:
            argv += ["--arms", ",".join(args.arms)]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    *argv,
                    "--worker",
                    "--rank",
                    str(r),
                    "--store",
                    os.path.join(tmp, "store"),
                    "--out",
                    out,
                ],
                env=env,
            )
            for r in range(args.cp)
        ]
        codes = [p.wait() for p in procs]
        if any(codes):
            print("hf_vision_ab: a rank failed (exit codes %s)" % codes, file=sys.stderr)
            return 1
        with open(out) as f:
            per_rank = json.load(f)
    report = summarize(args, per_rank)
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print("wrote %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
