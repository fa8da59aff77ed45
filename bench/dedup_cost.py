#!/usr/bin/env python3
"""What frame_sharding.dedup costs when nothing repeats, and what it saves when prompts repeat.

1. The hash: frameshard.frame_keys (the 128-bit content key of every frame unit, the only work
   dedup adds to a call without repeats) against the transformers Qwen2-VL vision tower at its
   released width (embed 1280, 16 heads, 32 blocks; timed as --depth blocks and scaled to 32),
   forward + backward, on the same pixel rows, float32 and bfloat16. Prints hash / tower.
2. The saving: a GRPO-shaped batch -- --distinct images each repeated --group times -- through
   the tower at --depth blocks patched by hf.enable on a one-rank group, dedup off against on
   (hash, the distinct images, the copy to every use), forward + backward.

Single process, no communication: the per-rank work of dedup. The CP saving comes on top (run
`python -m frameshard ab --data.preset grpo`). Run with the project's venv and the package
(scripts/python-dev.sh; PYTHONPATH=build/python-dev):
    .venv/bin/python bench/dedup_cost.py [--threads 2] [--rows 4096] [--depth 2] [--repeats 3]
        [--grpo-only] [--grpo-width 128]
"""

import argparse
import json
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import transformers

import frameshard
from frameshard import hf

RELEASED = dict(embed_dim=1280, num_heads=16, mlp_ratio=4, patch_size=14, temporal_patch_size=2, in_channels=3)
RELEASED_DEPTH = 32


def tower(depth, dtype, width=RELEASED["embed_dim"]):
    config = transformers.Qwen2VLVisionConfig(depth=depth, hidden_size=1536, **dict(RELEASED, embed_dim=width))
    config._attn_implementation = "sdpa"
    module = transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VisionTransformerPretrainedModel._from_config(
        config, attn_implementation="sdpa"
    )
    return module.to(dtype)


def timed(fn, repeats, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def tower_step(model, pixels, grid):
    def run():
        model.zero_grad(set_to_none=True)
        out = model(pixels, grid_thw=grid)
        out = out.pooler_output if hasattr(out, "pooler_output") else out
        out.float().square().mean().backward()

    return run


def images(n, side, features, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    rows = side * side
    return [torch.randn(rows, features, generator=gen).to(dtype) for _ in range(n)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rows", type=int, default=4096, help="pixel rows of the hash comparison")
    p.add_argument("--depth", type=int, default=2, help="blocks timed (scaled to 32 for the hash ratio)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--distinct", type=int, default=4)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--side", type=int, default=16, help="patches per image side in the GRPO batch")
    p.add_argument("--grpo-width", type=int, default=RELEASED["embed_dim"], help="the GRPO batch's tower width")
    p.add_argument("--grpo-only", action="store_true", help="skip the hash comparison")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    features = 3 * 2 * 14 * 14
    report = {"threads": a.threads, "rows": a.rows, "depth": a.depth, "hash": {}, "grpo": {}}
    side = int(a.rows**0.5) // 2 * 2
    for dtype in () if a.grpo_only else (torch.float32, torch.bfloat16):
        model = tower(a.depth, dtype)
        n = a.rows // (side * side) or 1
        pixels = torch.cat(images(n, side, features, dtype))
        grid = torch.tensor([[1, side, side]] * n)
        t_tower = timed(tower_step(model, pixels, grid), a.repeats) * RELEASED_DEPTH / a.depth
        t_hash = timed(lambda pixels=pixels, grid=grid: frameshard.frame_keys(pixels, grid), a.repeats)
        name = str(dtype).replace("torch.", "")
        report["hash"][name] = {"hash_s": t_hash, "tower_32_blocks_s": t_tower, "ratio": t_hash / t_tower}
        print(
            "hash %-8s %d rows: frame_keys %.4f s, tower fwd+bwd (32 blocks, scaled from %d) %.2f s: "
            "hash / tower = %.5f" % (name, pixels.shape[0], t_hash, a.depth, t_tower, t_hash / t_tower)
        )
    # The GRPO batch: distinct images repeated `group` times, float32, `depth` blocks, through
    # hf.enable on a one-rank group (CP 1: the per-rank work), dedup on against off.
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", store=dist.FileStore(tmp + "/store", 1), rank=0, world_size=1)
        model = tower(a.depth, torch.float32, a.grpo_width)
        distinct = images(a.distinct, a.side, features, torch.float32, seed=1)
        order = [i for _ in range(a.group) for i in range(a.distinct)]
        pixels = torch.cat([distinct[i] for i in order])
        grid = torch.tensor([[1, a.side, a.side]] * len(order))
        seconds = {}
        for dedup in (False, True):
            hf.enable(model, config=frameshard.FrameShardingConfig(enabled=True, dedup=dedup))
            seconds[dedup] = timed(tower_step(model, pixels, grid), a.repeats)
            hf.disable(model)
        frameshard.shut_down()
    t_all, t_dedup = seconds[False], seconds[True]
    report["grpo"] = {
        "distinct": a.distinct,
        "group": a.group,
        "side": a.side,
        "width": a.grpo_width,
        "without_dedup_s": t_all,
        "dedup_s": t_dedup,
        "ratio": t_dedup / t_all,
    }
    print(
        "grpo %d distinct x %d, %dx%d patches, width %d, %d blocks: without dedup %.3f s, dedup %.3f s: "
        "dedup / without = %.3f (ideal 1/%d = %.3f)"
        % (
            a.distinct,
            a.group,
            a.side,
            a.side,
            a.grpo_width,
            a.depth,
            t_all,
            t_dedup,
            t_dedup / t_all,
            a.group,
            1 / a.group,
        )
    )
    if a.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
