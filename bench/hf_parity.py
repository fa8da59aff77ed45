#!/usr/bin/env python3
"""Parity of frameshard.hf.enable against the unsharded transformers vision module, on a device.

For each family (transformers' own vision module, attn_implementation="sdpa", tiny random
weights: tests/python/split_models.py) and dtype, one training step on every rank, sharded
(hf.enable) against replicated (a copy of the same module, not enabled) on the same rank, with a
rank-specific loss (worker_common.rank_weights): every output the tower returns (DeepStack
features included) and every vision parameter gradient after a SUM all-reduce over the group,
each as max abs diff relative to max(1, the largest replicated value). Cases:

  whole   four images and a 4-frame video, whole frames (make_hf_fixtures' grid), sharded by frame
  split   split frames: the mixed batch of split_worker, its 16 x 16 image cut over the ranks

The ranks are --world processes in one Gloo group (tests/python/harness.run_world, this file
as the worker: worker_common.main). On --device cuda every rank uses cuda:0: NCCL refuses two
ranks on one GPU, Gloo moves the CUDA tensors through the host.

Usage (prints one JSON object on one line, with --json also to FILE; exit 0 when every case is
within its tolerance, else 1):
    PYTHONPATH=build-py/python-dev .venv/bin/python bench/hf_parity.py [--device cpu|cuda]
        [--dtypes float32,bfloat16] [--families qwen2_5_vl,qwen3_vl] [--kinds whole,split]
        [--world 2] [--json FILE]
"""

import argparse
import copy
import importlib.metadata
import json
import os
import sys

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "python"))

# Relative to max(1, the largest replicated value). Sharded and replicated run the same kernels on
# different row sets, so only the summation order differs: float32 rounds that far below 1e-4;
# bfloat16 (8 mantissa bits) rounds each differently ordered sum to one of a few neighbouring
# values, and the gradients sum over many rows and both ranks: 5e-2.
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2}
DEVICES = ("cpu", "cuda")
KINDS = ("whole", "split")
WHOLE_GRID = [[1, 4, 4], [1, 6, 8], [4, 4, 6], [1, 10, 2], [1, 16, 16]]  # make_hf_fixtures.GRID_THW


# ----------------------------------------------------------------- the rank side


def rank_case(family, dtype, device, kind):
    """The scenario `family:dtype:device:kind` of one rank (worker_common.main runs it)."""

    def run(rank, world, group):
        import torch  # noqa: PLC0415
        import transformers  # noqa: PLC0415

        import frameshard  # noqa: PLC0415  (the worker's imports: the driver's start stays short)
        import split_models  # noqa: PLC0415
        import split_worker  # noqa: PLC0415
        import worker_common  # noqa: PLC0415
        from frameshard import hf  # noqa: PLC0415
        from frameshard.hf import _family as registry  # noqa: PLC0415

        if device == "cuda":
            torch.cuda.set_device(0)
        dev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
        base = split_models.build(family, attn="sdpa", dtype=torch.float32)
        if kind == "split":
            config = split_worker.config()
            grid, plan = split_worker.split_grid("mixed", world, base)
        else:
            config = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0)
            grid, plan = WHOLE_GRID, frameshard.plan(WHOLE_GRID, world, config, tower=base)
        base = base.to(device=dev, dtype=getattr(torch, dtype))
        pixels = split_models.pixels(grid).to(device=dev, dtype=getattr(torch, dtype))
        grid_t = registry.tower_grid(registry.of_vision(base), torch.tensor(grid)).to(dev)

        def step(visual, enable):
            if enable:
                hf.enable(visual, group, config, timeout=120)
            outs = split_models.outputs(visual(pixels, grid_thw=grid_t))
            loss = sum((worker_common.rank_weights(o, rank, i).to(dev) * o).float().sum() for i, o in enumerate(outs))
            loss.backward()
            if device == "cuda":
                torch.cuda.synchronize()
            if enable:
                hf.disable(visual)
            # Gradients summed in float64 on the CPU: the comparison, not the reduction, is tested.
            grads = worker_common.reduced_grads(visual, group, float64_cpu=True)
            return {"out%d" % i: o.detach() for i, o in enumerate(outs)}, grads

        ref_out, ref_grads = step(copy.deepcopy(base), False)
        out, grads = step(base, True)
        out_diff, out_scale = worker_common.compare(out, ref_out)
        grad_diff, grad_scale = worker_common.compare(grads, ref_grads)
        return {
            "path": plan.path,
            "split": bool(plan.split),
            "outputs": len(out),
            "out_diff": out_diff / max(1.0, out_scale),
            "grad_diff": grad_diff / max(1.0, grad_scale),
            "out_scale": out_scale,
            "grad_scale": grad_scale,
            "device": str(next(base.parameters()).device),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        }

    return run


def rank_scenarios(families):
    return {
        "%s:%s:%s:%s" % (f, d, dev, k): rank_case(f, d, dev, k)
        for f in families
        for d in TOLERANCE
        for dev in DEVICES
        for k in KINDS
    }


# ----------------------------------------------------------------- the driver


def case_result(name, per_rank, error):
    family, dtype, _device, kind = name.split(":")
    tol = TOLERANCE[dtype]
    res = {"family": family, "dtype": dtype, "split": kind == "split", "tolerance": tol}
    res.update(ok=False, out_diff=None, grad_diff=None, error=error)
    if error is None:
        bad = [r for r in per_rank if not r["ok"]]
        if bad:
            res["error"] = bad[0]["error"]
            return res
        res["out_diff"] = max(r["out_diff"] for r in per_rank)
        res["grad_diff"] = max(r["grad_diff"] for r in per_rank)
        res["outputs"] = per_rank[0]["outputs"]
        res["ran_on"] = per_rank[0]["device"]
        # A plan that did not shard (or did not cut a frame) would pass trivially.
        if any(r["path"] != "sharded" or r["split"] != res["split"] for r in per_rank):
            res["error"] = "the plan did not shard as the case needs: path %s, split %s" % (
                per_rank[0]["path"],
                per_rank[0]["split"],
            )
        res["ok"] = res["error"] is None and res["out_diff"] <= tol and res["grad_diff"] <= tol
    return res


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=DEVICES)
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--families", default="qwen2_5_vl,qwen3_vl")
    p.add_argument("--kinds", default="whole,split", help="whole, split or both")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--json", metavar="FILE", help="also write the JSON object there")
    args = p.parse_args(argv)
    import pytest  # noqa: PLC0415

    import harness  # noqa: PLC0415  (imports pytest: only the driver needs it)

    names = [
        "%s:%s:%s:%s" % (f, d, args.device, k)
        for f in args.families.split(",")
        for d in args.dtypes.split(",")
        for k in args.kinds.split(",")
    ]
    for name in names:
        f, d, _, k = name.split(":")
        if d not in TOLERANCE or k not in KINDS:  # (a family unknown to split_models fails the ranks)
            p.error("unknown dtype or kind in %s (%s; %s)" % (name, ",".join(TOLERANCE), ",".join(KINDS)))
    error = None
    try:
        # run_world joins its folder with the worker's name: an absolute path names this file.
        results = harness.run_world(HERE, args.world, ["--scenarios=" + ",".join(names)])
    except (Exception, pytest.fail.Exception) as e:  # a rank died or hung: every case fails
        results, error = None, ("%s: %s" % (type(e).__name__, e))[-4000:]
    cases = [case_result(n, [r[n] for r in results] if results else None, error) for n in names]
    ran = results[0][names[0]] if results and results[0][names[0]]["ok"] else {}
    report = {
        "device": args.device,
        "world": args.world,
        # What the ranks ran (torch's CUDA suffix included); the installed versions if none said.
        "torch": ran.get("torch", importlib.metadata.version("torch")),
        "transformers": ran.get("transformers", importlib.metadata.version("transformers")),
        "cases": cases,
        "ok": bool(cases) and all(c["ok"] for c in cases),
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    if any(a.startswith("--rank") for a in sys.argv[1:]):  # a rank process of run_world
        import split_models
        import worker_common

        worker_common.main(rank_scenarios(split_models.FAMILIES))
    else:
        sys.exit(main())
