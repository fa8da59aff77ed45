#!/usr/bin/env python3
"""TRL's GRPOTrainer with frameshard.integrations.trl against the same run without it, and against
rank-local dedup only (each process encodes its own distinct images, as AReaL's PR #1676 does):
vision seconds, step seconds and peak memory per process, and the rows the towers encoded.

    PYTHONPATH=build/python-dev .venv/bin/python bench/trl_grpo_ab.py [--generations 8]
        [--per-device 2] [--steps-per-generation 2] [--steps 4] [--arms off,local,mesh] [--json FILE]

Each arm is one `torchrun --nproc-per-node 2` of this script (fresh processes: each arm's peak
memory is its own) training the same model from the same seed: a Qwen2-VL whose vision tower is
wide enough to matter on a CPU (--width 256, --depth 4) next to a one-layer language model, a
local processor, prompts with one image each of assorted sizes (up to 128 x 96 pixels, patch 4).

- vision seconds: per process, the wall time inside the vision tower -- the class forward of the
  vision module (what both arms run: frameshard's calls run it on their own frames) and its
  backward (from the gradient reaching the tower's outputs to the patch embedding's weight
  gradient), summed over the run's steps; collectives are outside it.
- step seconds: the training loop's wall time per optimizer step.
- peak memory: the process's peak resident set (VmHWM) during train(), reset just before it.
- rows: what the towers of both processes encoded (patch rows), and what the run's vision calls
  held (each use).

Arms: off (TRL alone), local (enable with FrameShardingConfig(enabled=False, dedup=True): each
process's own copies once, the processes' calls not pooled), mesh (enable(trainer): grpo_config())
and split (grpo_config() with split_frames: a frame larger than its share is cut across the
processes, so that one distinct image per call still spreads over both).

Prints one table and, with --json, writes every figure. Timings are only as quiet as the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ARMS = ("off", "local", "mesh")  # and "split" (with --no-checkpointing)
SIZES = ((64, 64), (96, 128), (128, 96), (80, 48), (48, 112))


def _rss_peak_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _reset_rss_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set


class _TowerClock:
    """Wall time inside the vision tower's forward and backward (see the module docstring)."""

    def __init__(self, visual):
        import torch

        self.forward_s = 0.0
        self.backward_s = 0.0
        self._backward_start = None
        cls = type(visual)
        self._cls, self._original = cls, cls.forward
        clock = self

        class _Mark(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.view_as(x)

            @staticmethod
            def backward(ctx, g):
                if clock._backward_start is None:
                    clock._backward_start = time.perf_counter()
                return g

        def forward(module, *args, **kwargs):
            start = time.perf_counter()
            out = clock._original(module, *args, **kwargs)
            clock.forward_s += time.perf_counter() - start
            if torch.is_grad_enabled() and out.pooler_output.requires_grad:
                out.pooler_output = _Mark.apply(out.pooler_output)
            return out

        def done(_param):
            if clock._backward_start is not None:
                clock.backward_s += time.perf_counter() - clock._backward_start
                clock._backward_start = None

        cls.forward = forward
        visual.patch_embed.proj.weight.register_post_accumulate_grad_hook(done)

    def remove(self):
        self._cls.forward = self._original


def _trainer(args, tmp: str):
    """The arm's GRPOTrainer over a model saved in `tmp`, frameshard enabled as the arm says."""
    import torch
    import trl

    sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
    import trl_grpo

    import frameshard
    from frameshard.integrations import trl as fs_trl

    model = os.path.join(tmp, "model")
    trl_grpo.tiny_qwen2_vl(
        width=args.width, depth=args.depth, heads=args.width // 64, mlp_ratio=4, hidden=64
    ).save_pretrained(model)
    config = trl_grpo.grpo_config(
        os.path.join(tmp, "out"),
        per_device_train_batch_size=args.per_device,
        num_generations=args.generations,
        steps_per_generation=args.steps_per_generation,
        max_completion_length=8,
        max_steps=args.steps,
        beta=args.beta,
        seed=5,
        model_init_kwargs=dict(dtype=torch.float32, attn_implementation="sdpa"),  # not the saved eager
        gradient_checkpointing=not args.no_checkpointing,
    )
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=trl_grpo.token_reward,
        args=config,
        train_dataset=trl_grpo.prompts(64, sizes=SIZES),
        processing_class=trl_grpo.tiny_processor(max_pixels=128 * 128),
    )
    if args.arm == "local":
        fs_trl.enable(trainer, frameshard.FrameShardingConfig(enabled=False, dedup=True, min_local_patch_rows=0))
    elif args.arm == "mesh":
        fs_trl.enable(trainer)
    elif args.arm == "split":  # a frame larger than its share cut across the processes
        # No exchange latency: the FLOP model prices 50 us as a GPU's 5 GFLOP, more than these frames cost.
        split = dataclasses.replace(fs_trl.grpo_config(), split_frames=True, split_exchange_latency_us=0.0)
        fs_trl.enable(trainer, split)
    return trainer


def _count_passes(trainer) -> dict:
    """pass name -> [rows, distinct rows] of its vision calls, both processes together."""
    from frameshard.hf import _patches

    passes: dict = {}
    if _patches.state(trainer, "trl") is None:
        return passes
    lockstep = _patches.state(trainer, "trl").lockstep
    after = lockstep.after

    def count(plan):
        after(plan)
        entry = passes.setdefault(lockstep.current.name if lockstep.current else "outside", [0, 0])
        entry[0] += plan.dedup.patch_rows
        entry[1] += plan.dedup.distinct_patch_rows

    lockstep.after = count
    return passes


def worker(args) -> None:
    """One process of one arm (under torchrun)."""
    import torch

    import frameshard

    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    with tempfile.TemporaryDirectory() as tmp:
        trainer = _trainer(args, tmp)
        passes = _count_passes(trainer)
        visual = trainer.model.model.visual
        clock = _TowerClock(visual)
        seen = []
        visual.patch_embed.register_forward_pre_hook(lambda _m, a: seen.append(a[0].shape[0]))
        torch.manual_seed(11)
        _reset_rss_peak()
        start = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - start
        peak = _rss_peak_kib()
        clock.remove()
        logs = [e for e in trainer.state.log_history if "loss" in e]
        result = dict(
            rank=rank,
            arm=args.arm,
            steps=args.steps,
            train_s=train_s,
            step_s=train_s / args.steps,
            vision_forward_s=clock.forward_s,
            vision_backward_s=clock.backward_s,
            vision_s=clock.forward_s + clock.backward_s,
            peak_rss_mib=peak / 1024,
            tower_rows=int(sum(seen)),
            losses=[e["loss"] for e in logs],
            rows_total=sum(e.get("frameshard/vision_rows_total", 0) for e in logs),
            rows_distinct=sum(e.get("frameshard/vision_rows_distinct", 0) for e in logs),
            passes=passes,
        )
        with open(os.path.join(args.out, "rank%d.json" % rank), "w") as f:
            json.dump(result, f)
    frameshard.shut_down()


def drive(args) -> None:
    results = {}
    for arm in args.arms.split(","):
        with tempfile.TemporaryDirectory() as out:
            cmd = [os.path.join(os.path.dirname(sys.executable), "torchrun"), "--standalone", "--nproc-per-node", "2"]
            cmd += [os.path.abspath(__file__), "--worker", "--arm", arm, "--out", out]
            for name in ("generations", "per_device", "steps_per_generation", "steps", "width", "depth", "beta"):
                cmd += ["--" + name.replace("_", "-"), str(getattr(args, name))]
            cmd += ["--no-checkpointing"] if args.no_checkpointing else []
            env = dict(os.environ, OMP_NUM_THREADS="1")
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if p.returncode != 0:
                raise SystemExit("trl_grpo_ab: arm %s failed:\n%s" % (arm, (p.stdout + p.stderr)[-6000:]))
            ranks = [json.load(open(os.path.join(out, "rank%d.json" % r))) for r in range(2)]
        results[arm] = ranks
    _report(results, args)


def _report(results: dict, args) -> None:
    off = results.get("off")
    print(
        "TRL GRPO, G %d, %d rows per process and micro-step, steps_per_generation %d, beta %g, %d steps, "
        "2 processes, vision width %d x %d blocks, gradient checkpointing %s"
        % (
            args.generations,
            args.per_device,
            args.steps_per_generation,
            args.beta,
            args.steps,
            args.width,
            args.depth,
            "off" if args.no_checkpointing else "on",
        )
    )
    print("%-6s %12s %12s %12s %12s %12s %14s" % ("arm", "vision s/st", "(sum ranks)", "vs off", "step s", "vs off",
                                                "peak MiB"))  # fmt: skip
    summary = {}
    for arm, ranks in results.items():
        vision = max(r["vision_s"] for r in ranks) / args.steps
        vision_sum = sum(r["vision_s"] for r in ranks) / args.steps
        step = max(r["step_s"] for r in ranks)
        peak = max(r["peak_rss_mib"] for r in ranks)
        ref = off and dict(
            vision=max(r["vision_s"] for r in off) / args.steps,
            vision_sum=sum(r["vision_s"] for r in off) / args.steps,
            step=max(r["step_s"] for r in off),
        )
        summary[arm] = dict(
            vision_s_per_step=vision,
            vision_sum_s_per_step=vision_sum,
            step_s=step,
            peak_rss_mib=peak,
            vision_vs_off=vision / ref["vision"] if ref else None,
            vision_sum_vs_off=vision_sum / ref["vision_sum"] if ref else None,
            step_vs_off=step / ref["step"] if ref else None,
            tower_rows=sum(r["tower_rows"] for r in ranks),
            losses=ranks[0]["losses"],
            distinct_per_pass={k: d / t for k, (t, d) in ranks[0]["passes"].items()},
        )
        s = summary[arm]
        print(
            "%-6s %12.3f %12.3f %12s %12.3f %12s %14.0f   tower rows %d, distinct/total rows per pass %s, "
            "losses %s"
            % (arm, vision, vision_sum, "%.3f / %.3f" % (s["vision_vs_off"], s["vision_sum_vs_off"]) if ref else "-",
               step, "%.3f" % s["step_vs_off"] if ref else "-", peak, s["tower_rows"],
               {k: round(v, 3) for k, v in s["distinct_per_pass"].items()}, ["%.6f" % x for x in s["losses"]])
        )  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), arms=results, summary=summary), f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--per-device", type=int, default=2)
    parser.add_argument("--steps-per-generation", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--beta", type=float, default=0.0)
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument(
        "--no-checkpointing",
        action="store_true",
        help="GRPOConfig(gradient_checkpointing=False) in every arm (split frames refuse HF checkpointing "
        "inside the vision module)",
    )
    parser.add_argument("--json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    worker(args) if args.worker else drive(args)


if __name__ == "__main__":
    main()
