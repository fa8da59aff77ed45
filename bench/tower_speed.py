#!/usr/bin/env python3
"""Vision tower speed: frameshard against Hugging Face transformers, same everything.

For each reference tower at a realistic width (a few layers), builds one random
transformers model, saves it (config.json + model.safetensors) and a batch of pixel rows,
then times, with the same weights, inputs, dtype, thread count and torch:

  frameshard  build/frameshard_tower_bench: load_qwen_vision + frameshard::encode (the
              `frameshard encode` path), attention through torch's fused SDPA per frame
  hf-sdpa     transformers' vision tower, attn_implementation="sdpa"
  hf-eager    transformers' vision tower, attn_implementation="eager"

forward only (no_grad) and forward + backward (loss = mean of squares of every output),
median of --repeats after --warmup, and prints the ratio frameshard / hf-sdpa (< 1: faster).

Run with the project's venv (scripts/setup-modern.sh) after building:
    .venv/bin/python bench/tower_speed.py [--threads 2] [--depth 2] [--repeats 3] [--json]
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
import make_hf_fixtures as fx  # noqa: E402  (pack_pixels, redraw_vision_weights)

TEXT_HIDDEN = 2048  # the merger's output width (a 2B-class language model)


def towers(depth):
    """family -> (config class, model class, config kwargs, patch size)."""
    text = dict(
        vocab_size=128,
        hidden_size=TEXT_HIDDEN,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=16,
        num_key_value_heads=1,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [16, 24, 24]},
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


# Two images and a 4-frame video (merged-patch multiples): 2,816 patch rows.
GRID = [[1, 32, 40], [1, 24, 24], [2, 16, 16]]


def make_pixels(patch, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for t, h, w in GRID:
        frames = rng.standard_normal((t * 2, 3, h * patch, w * patch), dtype=np.float32)
        rows.append(fx.pack_pixels(frames, 2, 2, patch))
    return np.concatenate(rows).astype(np.float32), np.array(GRID, dtype=np.int64)


def output_tensors(out):
    """Every tensor the tower returns that a language model consumes."""
    if isinstance(out, torch.Tensor):
        return [out]
    tensors = [out.pooler_output]
    for extra in getattr(out, "deepstack_features", None) or []:
        tensors.append(extra)
    return tensors


def time_hf(visual, pixels, grid, dtype, repeats, warmup):
    visual = visual.to(dtype)
    px = torch.from_numpy(pixels).to(dtype)
    g = torch.from_numpy(grid)
    fwd, fwd_bwd = [], []
    for i in range(warmup + repeats):
        with torch.no_grad():
            t0 = time.perf_counter()
            visual(px, grid_thw=g)
            if i >= warmup:
                fwd.append(1e3 * (time.perf_counter() - t0))
        t0 = time.perf_counter()
        loss = sum(o.float().square().mean() for o in output_tensors(visual(px, grid_thw=g)))
        loss.backward()
        if i >= warmup:
            fwd_bwd.append(1e3 * (time.perf_counter() - t0))
        visual.zero_grad(set_to_none=True)
    return {"forward_ms": fwd, "forward_backward_ms": fwd_bwd}


def run_family(family, spec, args, tmp):
    cfg_cls, model_cls, kwargs, patch = spec
    torch.manual_seed(0)
    config = getattr(transformers, cfg_cls)(**kwargs)
    results = {}
    pixels, grid = make_pixels(patch)
    model_dir = os.path.join(tmp, family)
    inputs = os.path.join(tmp, family + "_inputs.safetensors")
    for impl in ("sdpa", "eager"):
        model = getattr(transformers, model_cls)._from_config(config, attn_implementation=impl)
        visual = model.model.visual
        fx.redraw_vision_weights(visual, seed=1)
        if impl == "sdpa":
            model.save_pretrained(model_dir)
            save_file({"pixel_values": pixels, "grid_thw": grid}, inputs)
        results["hf-" + impl] = time_hf(visual, pixels, grid, args.torch_dtype, args.repeats, args.warmup)
        del model, visual
    out = subprocess.run(
        [
            args.bench,
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
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    results["frameshard"] = json.loads(out.stdout)
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", default="qwen2_vl,qwen2_5_vl,qwen3_vl")
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "frameshard_tower_bench"))
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    args.torch_dtype = getattr(torch, args.dtype)
    torch.set_num_threads(args.threads)
    specs = towers(args.depth)
    report = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": args.threads,
        "dtype": args.dtype,
        "depth": args.depth,
        "grid_thw": GRID,
        "families": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families.split(","):
            report["families"][family] = run_family(family, specs[family], args, tmp)
    for fam in report["families"].values():
        fs = fam["frameshard"]
        for phase in ("forward_ms", "forward_backward_ms"):
            key = phase.replace("_ms", "")
            fam[key + "_ratio_vs_hf_sdpa"] = statistics.median(fs[phase]) / statistics.median(fam["hf-sdpa"][phase])
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(
        "tower speed, median ms (torch %s, transformers %s, %d threads, %s, depth %d, %d rows)"
        % (
            report["torch"],
            report["transformers"],
            args.threads,
            args.dtype,
            args.depth,
            sum(t * h * w for t, h, w in GRID),
        )
    )
    print("%-11s %-20s %10s %10s %10s %12s" % ("tower", "phase", "frameshard", "hf-sdpa", "hf-eager", "fs/hf-sdpa"))
    for family, fam in report["families"].items():
        for phase in ("forward_ms", "forward_backward_ms"):
            med = {k: statistics.median(fam[k][phase]) for k in ("frameshard", "hf-sdpa", "hf-eager")}
            print(
                "%-11s %-20s %10.1f %10.1f %10.1f %12.2f"
                % (
                    family,
                    phase[:-3],
                    med["frameshard"],
                    med["hf-sdpa"],
                    med["hf-eager"],
                    med["frameshard"] / med["hf-sdpa"],
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
