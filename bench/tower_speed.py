#!/usr/bin/env python3
"""Vision tower speed: frameshard against Hugging Face transformers, same everything.

For each reference tower (--families) at its released width (--depth layers), builds one random
transformers model, saves it (config.json + model.safetensors) and a batch of pixel rows (two
images and a 2-frame video, 2,368 patch rows; --scale shrinks the frames' sides), then times, with
the same weights, inputs, dtype, device, thread count and torch:

  frameshard     --bin (build/bench/frameshard_tower_bench): load_qwen_vision +
                 frameshard::encode (the `frameshard encode` path), attention through torch's
                 fused SDPA per frame, on --device
  hf-<attn>      transformers' vision tower with attn_implementation=<attn>, for each of --attn
                 (default sdpa,eager; on cuda flash_attention_2 is added where
                 transformers.utils.is_flash_attn_2_available(): it needs bfloat16). One that
                 cannot be built or run is skipped, with the reason under "skipped".

forward only (no_grad) and forward + backward (loss = mean of squares of every output), median
of --repeats after --warmup (on cuda a device synchronize before each clock read), and prints
the ratio frameshard / hf-sdpa (< 1: faster).

Run with the project's venv (scripts/setup-modern.sh) after building:
    .venv/bin/python bench/tower_speed.py [--families qwen2_vl,qwen2_5_vl,qwen3_vl] [--depth 2]
        [--threads 2] [--repeats 3] [--warmup 1] [--dtype float32|bfloat16] [--device cpu|cuda]
        [--attn sdpa,eager] [--scale 1] [--bin PATH] [--json [FILE]]
--json alone prints the JSON report instead of the table; --json FILE writes it there too.
A toy run (CI's dry run, seconds): --families qwen2_vl --depth 1 --repeats 1 --warmup 0 --scale 0.25
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import make_hf_fixtures as fx  # noqa: E402  (pack_pixels, redraw_vision_weights, _text_config)

TEXT_HIDDEN = 2048  # the merger's output width (a 2B-class language model)


def towers(depth):
    """family -> (config class, model class, config kwargs, patch size)."""
    # The fixtures' one-layer text model (only the vision tower runs), 2048 wide.
    text = fx._text_config(
        dict(
            hidden_size=TEXT_HIDDEN,
            num_attention_heads=16,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [16, 24, 24]},
        )
    )
    common = dict(in_channels=3, temporal_patch_size=2, spatial_merge_size=2)
    return {
        "qwen2_vl": (
            "Qwen2VLConfig",
            "Qwen2VLForConditionalGeneration",
            dict(
                text_config=text,
                vision_config=dict(
                    depth=depth,
                    embed_dim=1280,
                    hidden_size=TEXT_HIDDEN,
                    num_heads=16,
                    mlp_ratio=4,
                    hidden_act="quick_gelu",
                    patch_size=14,
                    **common,
                ),
            ),
            14,
        ),
        "qwen2_5_vl": (
            "Qwen2_5_VLConfig",
            "Qwen2_5_VLForConditionalGeneration",
            dict(
                text_config=text,
                vision_config=dict(
                    depth=depth,
                    hidden_size=1280,
                    intermediate_size=3420,
                    num_heads=16,
                    hidden_act="silu",
                    out_hidden_size=TEXT_HIDDEN,
                    window_size=112,
                    fullatt_block_indexes=[depth - 1],
                    patch_size=14,
                    **common,
                ),
            ),
            14,
        ),
        "qwen3_vl": (
            "Qwen3VLConfig",
            "Qwen3VLForConditionalGeneration",
            dict(
                text_config=dict(text, head_dim=128),
                vision_config=dict(
                    depth=depth,
                    hidden_size=1152,
                    intermediate_size=4304,
                    num_heads=16,
                    hidden_act="gelu_pytorch_tanh",
                    out_hidden_size=TEXT_HIDDEN,
                    num_position_embeddings=2304,
                    deepstack_visual_indexes=[0],
                    patch_size=16,
                    **common,
                ),
            ),
            16,
        ),
    }


# Two images and a 2-frame video (merged-patch multiples): 2,368 patch rows.
GRID = [[1, 32, 40], [1, 24, 24], [2, 16, 16]]
MERGE = 2


def scaled_grid(scale):
    """GRID with each frame's sides times `scale`, kept multiples of the merge (at least one)."""
    side = lambda n: max(MERGE, int(round(n * scale / MERGE)) * MERGE)  # noqa: E731
    return [[t, side(h), side(w)] for t, h, w in GRID]


def widths(vision):
    """The tower's sizes from its vision config kwargs."""
    hidden = vision.get("embed_dim", vision.get("hidden_size"))
    return {
        "hidden": hidden,
        "intermediate": vision.get("intermediate_size", hidden * vision.get("mlp_ratio", 4)),
        "heads": vision["num_heads"],
        "out": vision.get("out_hidden_size", vision.get("hidden_size")),
        "depth": vision["depth"],
        "patch": vision["patch_size"],
    }


def make_pixels(patch, grid, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for t, h, w in grid:
        frames = rng.standard_normal((t * 2, 3, h * patch, w * patch), dtype=np.float32)
        rows.append(fx.pack_pixels(frames, 2, 2, patch))
    return np.concatenate(rows).astype(np.float32), np.array(grid, dtype=np.int64)


def output_tensors(out):
    """Every tensor the tower returns that a language model consumes."""
    if isinstance(out, torch.Tensor):
        return [out]
    tensors = [out.pooler_output]
    for extra in getattr(out, "deepstack_features", None) or []:
        tensors.append(extra)
    return tensors


def clock(device):
    """Wall-clock ms, after the device's queued work is done (cuda)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return 1e3 * time.perf_counter()


def time_hf(visual, pixels, grid, dtype, device, repeats, warmup):
    visual = visual.to(device=device, dtype=dtype)
    px = torch.from_numpy(pixels).to(device=device, dtype=dtype)
    g = torch.from_numpy(grid).to(device)
    fwd, fwd_bwd = [], []
    for i in range(warmup + repeats):
        with torch.no_grad():
            t0 = clock(device)
            visual(px, grid_thw=g)
            if i >= warmup:
                fwd.append(clock(device) - t0)
        t0 = clock(device)
        loss = sum(o.float().square().mean() for o in output_tensors(visual(px, grid_thw=g)))
        loss.backward()
        if i >= warmup:
            fwd_bwd.append(clock(device) - t0)
        visual.zero_grad(set_to_none=True)
    return {"forward_ms": fwd, "forward_backward_ms": fwd_bwd}


def run_family(family, spec, args, tmp):
    cfg_cls, model_cls, kwargs, patch = spec
    torch.manual_seed(0)
    config = getattr(transformers, cfg_cls)(**kwargs)
    results, skipped = {}, {}
    pixels, grid = make_pixels(patch, args.grid)
    model_dir = os.path.join(tmp, family)
    inputs = os.path.join(tmp, family + "_inputs.safetensors")
    for impl in args.attns:
        try:
            model = getattr(transformers, model_cls)._from_config(config, attn_implementation=impl)
        except (ImportError, ValueError) as e:  # not installed or not for this model
            skipped["hf-" + impl] = "%s: %s" % (type(e).__name__, e)
            continue
        visual = model.model.visual
        fx.redraw_vision_weights(visual, seed=1)  # the same weights for every arm
        if not os.path.isdir(model_dir):
            model.save_pretrained(model_dir)
            save_file({"pixel_values": pixels, "grid_thw": grid}, inputs)
        try:
            timed = time_hf(visual, pixels, grid, args.torch_dtype, args.torch_device, args.repeats, args.warmup)
            results["hf-" + impl] = timed
        except (RuntimeError, ValueError) as e:  # e.g. a kernel without this dtype
            skipped["hf-" + impl] = "%s: %s" % (type(e).__name__, str(e)[:300])
        del model, visual
        if args.torch_device.type == "cuda":
            torch.cuda.empty_cache()
    if not os.path.isdir(model_dir):  # no arm could be built: save the sdpa model for frameshard
        model = getattr(transformers, model_cls)._from_config(config, attn_implementation="sdpa")
        fx.redraw_vision_weights(model.model.visual, seed=1)
        model.save_pretrained(model_dir)
        save_file({"pixel_values": pixels, "grid_thw": grid}, inputs)
        del model
    device = ["--device", args.device]
    out = subprocess.run(
        [
            args.bin,
            "--model-dir",
            model_dir,
            "--inputs",
            inputs,
            "--dtype",
            args.dtype,
            "--threads",
            str(args.threads),
            "--repeats",
            str(args.repeats),
            "--warmup",
            str(args.warmup),
            *device,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    results["frameshard"] = json.loads(out.stdout)
    for arm in results.values():
        for phase in PHASES:
            arm[phase + "_median"] = statistics.median(arm[phase])
    report = {
        "widths": widths(kwargs["vision_config"]),
        "rows": int(sum(t * h * w for t, h, w in grid.tolist())),
        "dtype": args.dtype,
        "device": args.device,
        **results,
    }
    for phase in PHASES:
        key = phase.replace("_ms", "") + "_ratio_vs_hf_sdpa"
        sdpa = results.get("hf-sdpa")
        report[key] = results["frameshard"][phase + "_median"] / sdpa[phase + "_median"] if sdpa else None
    if skipped:
        report["skipped"] = skipped
    return report


PHASES = ("forward_ms", "forward_backward_ms")


def attn_list(args):
    """--attn, plus flash_attention_2 on cuda where transformers finds flash-attn."""
    attns = [a for a in args.attn.split(",") if a]
    if args.device == "cuda" and "flash_attention_2" not in attns:
        from transformers.utils import is_flash_attn_2_available  # noqa: PLC0415

        if is_flash_attn_2_available():
            attns.append("flash_attention_2")
    return attns


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", default="qwen2_vl,qwen2_5_vl,qwen3_vl")
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda: GPU 0")
    p.add_argument("--attn", default="sdpa,eager", help="transformers attention implementations to time")
    p.add_argument("--scale", type=float, default=1.0, help="the frames' sides times this (toy runs: 0.25)")
    default_bin = os.path.join(ROOT, "build", "bench", "frameshard_tower_bench")
    p.add_argument("--bin", "--bench", dest="bin", default=default_bin, help="the frameshard_tower_bench program")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE", help="alone: print JSON; FILE: write it there")
    args = p.parse_args(argv)
    specs = towers(args.depth)
    families = args.families.split(",")
    unknown = sorted(set(families) - set(specs))
    if unknown:
        p.error("unknown families %s (known: %s)" % (",".join(unknown), ",".join(specs)))
    if args.scale <= 0:
        p.error("--scale must be positive")
    args.torch_dtype = getattr(torch, args.dtype)
    args.torch_device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(0)
    args.grid = scaled_grid(args.scale)
    args.attns = attn_list(args)
    torch.set_num_threads(args.threads)
    report = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": args.threads,
        "dtype": args.dtype,
        "device": args.device,
        "depth": args.depth,
        "attn": args.attns,
        "grid_thw": args.grid,
        "families": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for family in families:
            report["families"][family] = run_family(family, specs[family], args, tmp)
    if args.json not in (None, "-"):
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    if args.json == "-":
        print(json.dumps(report, indent=1))
        return 0
    print_table(report)
    return 0


def print_table(report):
    arms = ["frameshard"] + ["hf-" + a for a in report["attn"]]
    print(
        "tower speed, median ms (torch %s, transformers %s, %d threads, %s on %s, depth %d, %d rows)"
        % (
            report["torch"],
            report["transformers"],
            report["threads"],
            report["dtype"],
            report["device"],
            report["depth"],
            sum(t * h * w for t, h, w in report["grid_thw"]),
        )
    )
    print("%-11s %-20s" % ("tower", "phase") + "".join(" %20s" % a for a in arms) + " %12s" % "fs/hf-sdpa")
    for family, fam in report["families"].items():
        for phase in PHASES:
            cells = "".join(" %20.1f" % fam[a][phase + "_median"] if a in fam else " %20s" % "-" for a in arms)
            ratio = fam[phase.replace("_ms", "") + "_ratio_vs_hf_sdpa"]
            print("%-11s %-20s%s %12s" % (family, phase[:-3], cells, "%.2f" % ratio if ratio is not None else "-"))
        for arm, why in fam.get("skipped", {}).items():
            print("%-11s %s skipped: %s" % (family, arm, why))


if __name__ == "__main__":
    sys.exit(main())
