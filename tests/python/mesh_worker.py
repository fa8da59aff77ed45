#!/usr/bin/env python3
"""One rank of the mesh tests of the frameshard Python package (test_mesh.py): the world group as
a DP 2 x CP (world / 2) mesh (frameshard.Mesh; rank = replica * cp + cp rank), each replica with
its own batch.

    python mesh_worker.py --rank R --world W --store FILE --out DIR [--scenarios a,b]

Every scenario compares a mesh run against the per-replica run on the same rank, in float64:
this replica's outputs (or, with owner routing, this rank's rows of them) and every parameter
gradient after a SUM all-reduce over the whole mesh, with a rank-specific loss
(worker_common.rank_weights). The per-replica run is the standard one: each rank runs the tower
on its own replica's whole batch (a text-only replica runs none).
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
from package_worker import SHARD_NO_FLOOR, TORCH_GRID, FrameTower  # noqa: E402
from worker_common import compare, rank_weights, reduced_grads  # noqa: E402

FEATURES = 12
# Replica 1's batch in the "two batches" scenarios: fewer, other media than replica 0's.
OTHER_GRID = [[2, 4, 4], [1, 8, 6]]


def replica_batch(grid, replica):
    """(grid_thw [n, 3], pixel_values, cu_seqlens) of one replica, seeded by the replica: the same
    on its cp ranks, different between replicas; [0, 3] and [0, FEATURES] for a text-only one."""
    grid_t = torch.tensor(grid, dtype=torch.int64).reshape(-1, 3)
    rows = int(grid_t.prod(-1).sum())
    gen = torch.Generator().manual_seed(100 + replica)
    pixel_values = torch.randn(rows, FEATURES, generator=gen, dtype=torch.float64)
    cu = torch.nn.functional.pad(
        torch.repeat_interleave(grid_t[:, 1] * grid_t[:, 2], grid_t[:, 0]).cumsum(0), (1, 0)
    ).to(torch.int32)
    return grid_t, pixel_values, cu


def scenario_torch(rank, world, group, grids, config=SHARD_NO_FLOOR, owner=False):
    mesh = frameshard.Mesh(group, 2, world // 2)
    q, c = mesh.replica(rank), mesh.cp_rank(rank)
    torch.manual_seed(7)
    tower = FrameTower(FEATURES, 16, 8).double()
    grid_t, pixel_values, cu = replica_batch(grids[q], q)
    tokens = int(grid_t.prod(-1).sum()) // 4
    token_owner, mine = None, torch.arange(tokens)
    if owner:
        # Visual token i at sequence position 2i + 1 of the replica's sequence.
        seq = max(2 * mesh.cp, (2 * tokens + 2 * mesh.cp - 1) // (2 * mesh.cp) * 2 * mesh.cp)
        token_owner = frameshard.visual_token_owners([2 * i + 1 for i in range(tokens)], seq, mesh.cp)
        mine = torch.tensor([i for i in range(tokens) if token_owner[i] == c], dtype=torch.int64)
        config = dataclasses.replace(config, gather="owner")

    def step(run):
        tower.zero_grad()
        outs = run()
        tensors, loss = {}, torch.zeros((), dtype=torch.float64)
        if outs is not None:
            for i, o in enumerate(outs):
                loss = loss + (rank_weights(o, rank, 20 + i) * o).sum()
                tensors["out_%d" % i] = o.detach()
        if loss.requires_grad:  # not a text-only replica's per-replica run (no tower ran)
            loss.backward()
        return tensors, reduced_grads(tower, group)

    def per_replica():
        if tokens == 0:
            return None  # a text-only replica runs no tower
        return [o[mine] for o in tower(pixel_values, grid_t, cu)]

    ref_out, ref_grads = step(per_replica)
    tower.seen.clear()
    plan = [None]

    def meshed():
        out, plan[0] = frameshard.shard_vision(
            tower, pixel_values, grid_t, config=config, mesh=mesh, return_plan=True, token_owner=token_owner
        )
        return out

    out, grads = step(meshed)
    if plan[0].path == "sharded" and tokens == 0:
        ref_out = {k: v[:0] for k, v in out.items()}  # [0, hidden]: nothing to compare but shapes
    out_diff, out_scale = compare(out, ref_out)
    grad_diff, grad_scale = compare(grads, ref_grads)
    return {
        "path": plan[0].path,
        "out_diff": out_diff,
        "out_scale": out_scale,
        "grad_diff": grad_diff,
        "grad_scale": grad_scale,
        "outputs": sorted(out),
        "rows": [int(v.shape[0]) for v in out.values()],
        "seen_rows": [s[0] for s in tower.seen],
        "replica_rows": int(pixel_values.shape[0]),
        "plan_world": plan[0].world,
        "mesh_mode": plan[0].mesh.mode if plan[0].mesh is not None else None,
        "mesh_gain": plan[0].mesh.gain if plan[0].mesh is not None else None,
    }


def scenario_hf(family, rank, world, group):
    """Replica 0 encodes the fixture's images through get_image_features; replica 1 is text-only
    and joins with hf.join_without_media."""
    mesh = frameshard.Mesh(group, 2, world // 2)
    torch.manual_seed(11)
    model, visual, inputs = hf_models.build(family)
    model.double()
    inputs = {k: (v.double() if v.is_floating_point() else v) for k, v in inputs.items()}
    text_only = mesh.replica(rank) == 1

    def step(join):
        model.zero_grad()
        tensors, loss = {}, torch.zeros((), dtype=torch.float64)
        if not text_only:
            outs = hf_models.vision_outputs(model, visual, inputs)
            loss = sum((rank_weights(o, rank, 10 + i) * o).sum() for i, o in enumerate(outs))
            tensors = {"vision_%d" % i: o.detach() for i, o in enumerate(outs)}
        elif join:
            loss = loss + hf.join_without_media(model)
        if loss.requires_grad:  # not the text-only replica's per-replica run (no tower ran)
            loss.backward()
        return tensors, reduced_grads(model, group)

    ref_out, ref_grads = step(False)
    seen = []
    hook = visual.patch_embed.register_forward_pre_hook(lambda _m, args: seen.append(int(args[0].shape[0])))
    hf.enable(model, config=SHARD_NO_FLOOR, mesh=mesh)
    try:
        out, grads = step(True)
    finally:
        hf.disable(model)
        hook.remove()
    out_diff, out_scale = compare(out, ref_out)
    grad_diff, grad_scale = compare(grads, ref_grads)
    return {
        "path": "sharded" if seen and min(seen) > 0 else "replicated?",
        "seen_rows": seen,
        "text_only": text_only,
        "out_diff": out_diff,
        "out_scale": out_scale,
        "grad_diff": grad_diff,
        "grad_scale": grad_scale,
        "outputs": sorted(out),
        "params_with_grad": sum(1 for g in ref_grads.values() if float(g.abs().max()) > 0),
    }


def scenario_errors(rank, world, group):
    """Mesh arguments refused alike on every rank, before any collective."""
    mesh = frameshard.Mesh(group, 2, world // 2)
    grid_t, pixel_values, _ = replica_batch(TORCH_GRID, 0)
    tower = FrameTower(FEATURES, 16, 8).double()
    messages = []
    for call in (
        lambda: frameshard.shard_vision(tower, pixel_values, grid_t, group, mesh=mesh),
        lambda: frameshard.shard_vision(
            tower, pixel_values, grid_t, group, frameshard.FrameShardingConfig(mesh_dims=["dp", "cp"])
        ),
        lambda: frameshard.Mesh(group, 0, 2),
        # A mesh whose dp * cp is not the group's size: every rank raises the same error.
        lambda: frameshard.shard_vision(tower, pixel_values, grid_t, mesh=frameshard.Mesh(group, 2, world)),
    ):
        try:
            call()
            messages.append(None)
        except frameshard.FrameshardError as e:
            messages.append(str(e))
    return {"messages": messages, "tower_calls": len(tower.seen)}


SCENARIOS = {
    "torch_two_batches": lambda r, w, g: scenario_torch(r, w, g, [TORCH_GRID, OTHER_GRID]),
    "torch_text_only": lambda r, w, g: scenario_torch(r, w, g, [TORCH_GRID, []]),
    "torch_owner": lambda r, w, g: scenario_torch(r, w, g, [TORCH_GRID, []], owner=True),
    # Above the thresholds' reach: the mesh replicates (each replica encodes its own batch).
    "torch_replicated": lambda r, w, g: scenario_torch(
        r, w, g, [TORCH_GRID, []], frameshard.FrameShardingConfig(enabled=True)
    ),
    # Policy auto: equal batches stay on their own replica's ranks; the straggler pools.
    "torch_auto_equal": lambda r, w, g: scenario_torch(
        r, w, g, [TORCH_GRID, TORCH_GRID], dataclasses.replace(SHARD_NO_FLOOR, policy="auto")
    ),
    "torch_auto_text_only": lambda r, w, g: scenario_torch(
        r, w, g, [TORCH_GRID, []], dataclasses.replace(SHARD_NO_FLOOR, policy="auto")
    ),
    "hf_qwen3_vl": lambda r, w, g: scenario_hf("qwen3_vl", r, w, g),
    "errors": scenario_errors,
}


if __name__ == "__main__":
    worker_common.main(SCENARIOS)
