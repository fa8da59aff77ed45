#!/usr/bin/env python3
"""One rank of the dedup tests of the frameshard Python package (test_dedup.py): each distinct
frame encoded once (FrameShardingConfig(dedup=True)) on GRPO-shaped batches, where every prompt's
images repeat in several samples.

    python dedup_worker.py --rank R --world W --store FILE --out DIR [--scenarios a,b]

World 2: the CP group over both ranks, and the mesh DP 2 x CP 1; world 4: the mesh DP 2 x CP 2.
Every scenario compares, in float64, the dedup run against the run WITHOUT dedup on the same
rank (which encodes every use): the outputs this rank receives and every parameter gradient
after a SUM all-reduce, with a rank-specific loss (worker_common.rank_weights), and records the
rows each tower call saw, so the test can check that the ranks together encode each distinct
frame once.
"""

import dataclasses
import os
import sys

import torch

import frameshard
from frameshard import hf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
import worker_common  # noqa: E402
from package_worker import SHARD_NO_FLOOR, FrameTower  # noqa: E402
from worker_common import rank_weights, reduced_grads  # noqa: E402

FEATURES = 12
DEDUP = dataclasses.replace(SHARD_NO_FLOOR, dedup=True)
# Distinct media of the torch scenarios: two images and a 2-frame video.
MEDIA = {"A": [1, 8, 8], "B": [1, 4, 8], "V": [2, 4, 4]}


def batch(names, seed=5):
    """(grid_thw, pixel_values, cu_seqlens) of a batch of the named MEDIA: a name's pixel rows are
    the same wherever (and on whichever rank) it appears."""
    grid, rows = [], []
    for name in names:
        t, h, w = MEDIA[name]
        gen = torch.Generator().manual_seed(seed * 1000 + sorted(MEDIA).index(name))
        rows.append(torch.randn(t * h * w, FEATURES, generator=gen, dtype=torch.float64))
        grid.append(MEDIA[name])
    grid_t = torch.tensor(grid, dtype=torch.int64).reshape(-1, 3)
    cu = torch.nn.functional.pad(
        torch.repeat_interleave(grid_t[:, 1] * grid_t[:, 2], grid_t[:, 0]).cumsum(0), (1, 0)
    ).to(torch.int32)
    return grid_t, torch.cat(rows) if rows else torch.zeros(0, FEATURES, dtype=torch.float64), cu


def distinct_rows(names):
    return sum(MEDIA[n][0] * MEDIA[n][1] * MEDIA[n][2] for n in set(names))


def run_both(tower, rank, group, run_plain, run_dedup, keep=None):
    """(outputs, gradients) without and with dedup, and the dedup run's plan and tower rows."""

    def step(run):
        tower.zero_grad()
        out = run()
        out = out if isinstance(out, (list, tuple)) else [out]
        loss = sum((rank_weights(o, rank, 30 + i) * o).sum() for i, o in enumerate(out))
        loss.backward()
        return {"out_%d" % i: o.detach() for i, o in enumerate(out)}, reduced_grads(tower, group)

    ref = step(run_plain)
    tower.seen.clear()
    got = step(run_dedup)
    return {**worker_common.diffs(got[0], ref[0], got[1], ref[1]), "seen_rows": sum(s[0] for s in tower.seen)}


def scenario_cp(rank, world, group, owner=False, media_keys=False):
    """A GRPO batch (A four times, B three times, V once) on the CP group."""
    names = ["A", "B", "A", "V", "B", "A", "B", "A"]
    torch.manual_seed(7)
    tower = FrameTower(FEATURES, 16, 8).double()
    grid_t, pixel_values, cu = batch(names)
    tokens = int(grid_t.prod(-1).sum()) // 4
    token_owner, mine = None, torch.arange(tokens)
    config = DEDUP
    if owner:
        seq = (2 * tokens + 2 * world - 1) // (2 * world) * 2 * world
        token_owner = frameshard.visual_token_owners([2 * i + 1 for i in range(tokens)], seq, world)
        mine = torch.tensor([i for i in range(tokens) if token_owner[i] == rank], dtype=torch.int64)
        config = dataclasses.replace(config, gather="owner")
    plan = [None]

    def dedup():
        out, plan[0] = frameshard.shard_vision(
            tower,
            pixel_values,
            grid_t,
            group,
            config,
            return_plan=True,
            token_owner=token_owner,
            media_keys=names if media_keys else None,
        )
        return out

    res = run_both(tower, rank, group, lambda: [o[mine] for o in tower(pixel_values, grid_t, cu)], dedup)
    res.update(
        distinct_rows=distinct_rows(names),
        plan=dataclasses.asdict(plan[0].dedup),
        path=plan[0].path,
    )
    return res


def scenario_mesh(rank, world, group, spread=True):
    """A GRPO group spread over the replicas (verl's sequence-length balancing): replica 0 holds
    A, B, A, replica 1 holds B, A, V, A; each replica's reference is its own per-replica run."""
    mesh = frameshard.Mesh(group, 2, world // 2)
    q = mesh.replica(rank)
    names = [["A", "B", "A"], ["B", "A", "V", "A"]][q]
    torch.manual_seed(7)
    tower = FrameTower(FEATURES, 16, 8).double()
    grid_t, pixel_values, cu = batch(names)
    config = dataclasses.replace(DEDUP, mesh_dims=["dp", "cp"])
    plan = [None]

    def dedup():
        out, plan[0] = frameshard.shard_vision(tower, pixel_values, grid_t, config=config, mesh=mesh, return_plan=True)
        return out

    # Per replica, without dedup: the standard DP x CP run's gradients are the mean over replicas
    # (each replica's cp ranks hold the same loss); reduced_grads sums, so compare sums alike.
    res = run_both(tower, rank, group, lambda: tower(pixel_values, grid_t, cu), dedup)
    res.update(
        distinct_rows=distinct_rows(["A", "B", "A", "B", "A", "V", "A"]),
        plan=dataclasses.asdict(plan[0].dedup),
        path=plan[0].path,
    )
    return res


def hf_runs(model, visual, forward, config, rank, group, distinct_rows, target=None):
    """`forward()` (the vision outputs, a list) without and with hf.enable(model, target or group,
    config):
    the diffs of the outputs and of the reduced gradients, and the rows the patch embedding saw
    across the enabled run's calls."""
    seen = []
    hook = visual.patch_embed.register_forward_pre_hook(lambda _m, args: seen.append(int(args[0].shape[0])))

    def step(enabled):
        model.zero_grad()
        if enabled:
            hf.enable(model, target if target is not None else group, config)
        try:
            outs = forward()
        finally:
            if enabled:
                hf.disable(model)
        loss = sum((rank_weights(o, rank, 40 + i) * o).sum() for i, o in enumerate(outs))
        loss.backward()
        return {"out%d" % i: o.detach() for i, o in enumerate(outs)}, reduced_grads(model, group)

    try:
        ref = step(False)
        seen.clear()
        got = step(True)
    finally:
        hook.remove()
    return {
        **worker_common.diffs(got[0], ref[0], got[1], ref[1]),
        "seen_rows": sum(seen),
        # A share of the distinct rows: the sharded path (replicated, each rank sees them all).
        "path": "sharded" if sum(seen) < distinct_rows else "replicated",
        "distinct_rows": distinct_rows,
    }


def hf_qwen2_vl(order):
    """(model, vision module, inputs of the fixture's images in `order`, every image's rows):
    transformers Qwen2-VL in float64."""
    torch.manual_seed(11)
    model, visual, inputs = hf_models.build("qwen2_vl")
    model.double()
    grid = inputs["image_grid_thw"]
    sizes = grid.prod(-1).tolist()
    images = list(inputs["pixel_values"].double().split(sizes))
    order = order(len(images))
    batch = {"pixel_values": torch.cat([images[i] for i in order]), "image_grid_thw": grid[order]}
    return model, visual, batch, sizes


def scenario_hf_grpo(rank, world, group):
    """transformers Qwen2-VL through hf.enable: the fixture's images, each repeated 4 times,
    against the unsharded module without dedup (outputs and every gradient)."""
    model, visual, grpo, sizes = hf_qwen2_vl(lambda n: [i for _ in range(4) for i in range(n)])
    res = hf_runs(model, visual, lambda: hf_models.vision_outputs(model, visual, grpo), DEDUP, rank, group, sum(sizes))
    res["total_rows"] = 4 * sum(sizes)
    return res


def scenario_hf_paths(rank, world, group, path):
    """Qwen2-VL through hf.enable with dedup on each path a call can take: the CP group below
    the thresholds (replicated), and the DP x CP 1 mesh with each rank its own batch, sharded and
    below the thresholds. Against each rank's own batch without frameshard."""
    order = [0, 0, 1, 1, 2, 0] if rank == 0 or path == "cp_replicated" else [1, 2, 1, 3]
    model, visual, batch, sizes = hf_qwen2_vl(lambda _n: order)
    config = frameshard.FrameShardingConfig(enabled=True, dedup=True)  # thresholds: replicated
    target = group
    if path.startswith("mesh"):
        config = dataclasses.replace(config, mesh_dims=["dp", "cp"])
        target = frameshard.Mesh(group, world, 1)
    if path == "mesh_sharded":
        config = dataclasses.replace(config, min_tokens=0, min_frames=0, min_local_patch_rows=0)
    own = sum(sizes[i] for i in set(order))  # what a replicated call encodes on this rank
    forward = lambda: hf_models.vision_outputs(model, visual, batch)  # noqa: E731
    return hf_runs(model, visual, forward, config, rank, group, own, target=target)


def scenario_hf_split(rank, world, group):
    """transformers Qwen3-VL's vision module with split frames and dedup: a page the plan cuts,
    sampled 3 times, against the unsharded module without dedup."""
    import split_models  # noqa: PLC0415
    import split_worker  # noqa: PLC0415

    base = split_models.build("qwen3_vl")
    page, _ = split_worker.split_grid("one", world, base)
    grid = [list(g) for g in page] * 3
    one = split_models.pixels(page)
    pv = torch.cat([one] * 3)
    config = dataclasses.replace(split_worker.config(), dedup=True)
    res = hf_runs(
        base,
        base,
        lambda: split_models.outputs(base(pv, grid_thw=torch.tensor(grid))),
        config,
        rank,
        group,
        int(one.shape[0]),
    )
    res["split"] = bool(frameshard.plan(page, world, config, tower=base).split)
    return res


def scenario_errors(rank, world, group):
    """Ranks whose media keys disagree raise the same error on every rank; media_keys without
    dedup is refused."""
    grid_t, pixel_values, _ = batch(["A", "B", "A"])
    tower = FrameTower(FEATURES, 16, 8).double()
    messages = []
    keys = ["a", "b", "a"] if rank == 0 else ["a", "b", "c"]
    for call in (
        lambda: frameshard.shard_vision(tower, pixel_values, grid_t, group, DEDUP, media_keys=keys),
        lambda: frameshard.shard_vision(tower, pixel_values, grid_t, group, SHARD_NO_FLOOR, media_keys=["a"] * 3),
        lambda: frameshard.shard_vision(tower, pixel_values, grid_t, group, DEDUP, media_keys=[1.5] * 3),
    ):
        try:
            call()
            messages.append(None)
        except frameshard.FrameshardError as e:
            messages.append(str(e))
    return {"messages": messages}


SCENARIOS = {
    "cp": scenario_cp,
    "cp_owner": lambda r, w, g: scenario_cp(r, w, g, owner=True),
    "cp_media_keys": lambda r, w, g: scenario_cp(r, w, g, media_keys=True),
    "mesh": scenario_mesh,
    "hf_grpo": scenario_hf_grpo,
    "hf_split": scenario_hf_split,
    **{
        "hf_" + p: (lambda r, w, g, p=p: scenario_hf_paths(r, w, g, p))
        for p in ("cp_replicated", "mesh_sharded", "mesh_replicated")
    },
    "errors": scenario_errors,
}


def default(world):
    return ["mesh"] if world == 4 else list(SCENARIOS)


if __name__ == "__main__":
    worker_common.main(SCENARIOS, default)
