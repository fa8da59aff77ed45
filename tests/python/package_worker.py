#!/usr/bin/env python3
"""One rank of the multi-process tests of the frameshard Python package (test_package.py).

    python package_worker.py --rank R --world W --store FILE --out DIR [--scenarios a,b]

Joins a Gloo group over a FileStore, runs each scenario, and writes DIR/rank<R>.json
(worker_common.main). The assertions live in test_package.py; a scenario here only measures (max
differences, rows seen, messages raised), so one process launch per world size serves every
test.

Parity scenarios compare a sharded run against a replicated run on the same rank, in float64:
outputs, and every parameter gradient after a SUM all-reduce over the group, with a
rank-specific loss (worker_common.rank_weights), which is what a DP x CP training step does.
"""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import frameshard
from frameshard import hf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
import worker_common  # noqa: E402
from worker_common import max_diff, rank_weights, reduced_grads  # noqa: E402

# Seven frame units (an image, a 4-frame video split by the planner, images of other sizes).
TORCH_GRID = [[1, 4, 4], [4, 4, 6], [1, 6, 8], [1, 2, 2], [1, 10, 2]]
SHARD_ALL = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0)
SHARD_NO_FLOOR = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0, min_local_patch_rows=0)


class FrameTower(torch.nn.Module):
    """A pure-torch tower that encodes each frame independently: per-patch MLP, softmax attention
    inside each cu_seqlens segment, 2x2 merge, and a second (DeepStack-like) output."""

    def __init__(self, features, hidden, out, merge=2):
        super().__init__()
        self.merge = merge
        self.embed = torch.nn.Linear(features, hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.merger = torch.nn.Linear(hidden * merge * merge, out)
        self.aux = torch.nn.Linear(hidden * merge * merge, out // 2)
        self.seen = []  # (patch rows, grid rows) of every call

    def forward(self, pixel_values, grid_thw, cu_seqlens):
        self.seen.append((int(pixel_values.shape[0]), grid_thw.tolist()))
        x = torch.tanh(self.embed(pixel_values))
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        bounds = cu_seqlens.tolist()
        mixed = []
        for a, b in zip(bounds[:-1], bounds[1:], strict=False):
            att = torch.softmax(q[a:b] @ k[a:b].T / q.shape[1] ** 0.5, dim=-1)
            mixed.append(att @ v[a:b])
        x = x + torch.cat(mixed, dim=0)
        merged = x.reshape(-1, x.shape[1] * self.merge * self.merge)
        return self.merger(merged), torch.relu(self.aux(merged))


# ----------------------------------------------------------------- scenarios


def torch_tower_problem(grid, merge=2):
    """The same seeded float64 FrameTower, pixels and cu_seqlens on every rank."""
    torch.manual_seed(7)
    features = 12
    tower = FrameTower(features, 16, 8, merge).double()
    grid_t = torch.tensor(grid, dtype=torch.int64)
    rows = int(grid_t.prod(-1).sum())
    pixel_values = torch.randn(rows, features, dtype=torch.float64)
    cu = torch.nn.functional.pad(
        torch.repeat_interleave(grid_t[:, 1] * grid_t[:, 2], grid_t[:, 0]).cumsum(0), (1, 0)
    ).to(torch.int32)
    return tower, grid_t, rows, pixel_values, cu


def scenario_torch_tower(rank, world, group, grid=TORCH_GRID, config=SHARD_ALL):
    tower, grid_t, rows, pixel_values, cu = torch_tower_problem(grid)

    def step(run):
        tower.zero_grad()
        emb, aux = run()
        loss = (rank_weights(emb, rank, 1) * emb).sum() + (rank_weights(aux, rank, 2) * aux).sum()
        loss.backward()
        return {"emb": emb.detach(), "aux": aux.detach()}, reduced_grads(tower, group)

    ref_out, ref_grads = step(lambda: tower(pixel_values, grid_t, cu))
    tower.seen.clear()
    plan = None

    def sharded():
        nonlocal plan
        (emb, aux), plan = frameshard.shard_vision(tower, pixel_values, grid_t, group, config, return_plan=True)
        return emb, aux

    out, grads = step(sharded)
    mine = plan.ranks[rank]
    return {
        "path": plan.path,
        **worker_common.diffs(out, ref_out, grads, ref_grads),
        "grad_names": sorted(grads),
        "seen_rows": [s[0] for s in tower.seen],
        "seen_grid": [s[1] for s in tower.seen],
        "plan_local_patch_rows": mine.local_patch_rows,
        "plan_real_patch_rows": mine.real_patch_rows,
        "plan_grid": [list(g) for g in mine.grid],
        "plan_dummy_frames": mine.dummy_frames,
        "plan_pad_frames": mine.pad_frames,
        "total_patch_rows": rows,
        "real_rows_all_ranks": [r.real_patch_rows for r in plan.ranks],
    }


def scenario_torch_tower_owner(rank, world, group):
    # gather="owner": visual token i sits at sequence position 2i + 1; each rank receives only
    # the rows of its load-balanced chunks, and its loss uses exactly those rows.
    tower, grid_t, rows, pixel_values, cu = torch_tower_problem(TORCH_GRID)
    tokens = rows // 4  # 2x2 merge
    pad = 2 * world
    seq_len = (2 * tokens + pad - 1) // pad * pad
    owner = frameshard.visual_token_owners([2 * i + 1 for i in range(tokens)], seq_len, world)
    mine = torch.tensor([i for i in range(tokens) if owner[i] == rank], dtype=torch.int64)

    def step(run, select):
        tower.zero_grad()
        emb, aux = run()
        if select:
            emb, aux = emb[mine], aux[mine]
        loss = (rank_weights(emb, rank, 3) * emb).sum() + (rank_weights(aux, rank, 4) * aux).sum()
        loss.backward()
        return {"emb": emb.detach(), "aux": aux.detach()}, reduced_grads(tower, group)

    ref_out, ref_grads = step(lambda: tower(pixel_values, grid_t, cu), True)
    config = frameshard.FrameShardingConfig(
        enabled=True, min_tokens=0, min_frames=0, min_local_patch_rows=0, gather="owner"
    )
    plan = None

    def owned():
        nonlocal plan
        out, plan = frameshard.shard_vision(
            tower, pixel_values, grid_t, group, config, return_plan=True, token_owner=owner
        )
        return out

    out, grads = step(owned, False)
    return {
        "path": plan.path,
        **worker_common.diffs(out, ref_out, grads, ref_grads),
        "owned_rows": int(out["emb"].shape[0]),
        "total_tokens": tokens,
    }


def scenario_torch_tower_dummy(rank, world, group):
    # Two frame units: at world 3 one rank has no real frame and encodes a dummy frame.
    return scenario_torch_tower(rank, world, group, [[1, 4, 4], [1, 6, 4]], SHARD_NO_FLOOR)


def scenario_gather(rank, world, group):
    counts = [r + 1 if r != 1 else 0 for r in range(world)]
    local = torch.full((counts[rank], 3), float(rank), dtype=torch.float64, requires_grad=True)
    full = frameshard.all_gather_rows(local, counts, group)
    expected = torch.cat([torch.full((c, 3), float(r), dtype=torch.float64) for r, c in enumerate(counts)])
    # d/dlocal of sum_q (q + 1) * sum(full_q) = sum_q (q + 1) on every row.
    (full * (rank + 1)).sum().backward()
    want = world * (world + 1) / 2
    grad = local.grad if local.grad is not None else torch.zeros(0)
    exchanged = frameshard.all_gather_rows(local.detach(), None, group)  # counts exchanged first
    return {
        "value_diff": max_diff(full.detach(), expected),
        "grad_diff": max_diff(grad, torch.full_like(grad, want)),
        "rows": int(full.shape[0]),
        "exchanged_diff": max_diff(exchanged, expected),
    }


def scenario_mismatch(rank, world, group):
    tower = FrameTower(12, 16, 8).double()
    grid = torch.tensor(TORCH_GRID)
    pixel_values = torch.randn(int(grid.prod(-1).sum()), 12, dtype=torch.float64)
    result = worker_common.raised(
        lambda: frameshard.shard_vision(tower, pixel_values, grid, group, SHARD_ALL, cp_size=world + 1)
    )
    return {**result, "tower_calls": len(tower.seen)}


def scenario_grid_mismatch(rank, world, group):
    """Rank 1's batch has another third image: every rank raises, naming that grid row."""
    tower = FrameTower(12, 16, 8).double()
    grid = [list(g) for g in TORCH_GRID]
    if rank == 1:
        grid[2] = [1, 8, 6]
    grid = torch.tensor(grid)
    pixel_values = torch.randn(int(grid.prod(-1).sum()), 12, dtype=torch.float64)
    return worker_common.raised(
        lambda: frameshard.shard_vision(tower, pixel_values, grid, group, SHARD_ALL, timeout=30)
    )


def scenario_tower_error(rank, world, group):
    grid = torch.tensor(TORCH_GRID)
    pixel_values = torch.randn(int(grid.prod(-1).sum()), 12, dtype=torch.float64)
    tower = FrameTower(12, 16, 8).double()

    def failing(pv, g, cu):
        if rank == 1:
            raise KeyError("boom on rank 1")
        return tower(pv, g, cu)

    return worker_common.raised(
        lambda: frameshard.shard_vision(failing, pixel_values, grid, group, SHARD_ALL, timeout=30)
    )


def scenario_gil(rank, world, group):
    """The GIL is released while a collective waits: on rank 0 a Python thread keeps counting
    while the collective waits for the last rank, which arrives 0.5 s late. With the GIL held the
    thread could not run at all during the call."""
    counter = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            counter[0] += 1

    thread = threading.Thread(target=count)
    thread.start()
    grid = torch.tensor(TORCH_GRID)
    pixel_values = torch.randn(int(grid.prod(-1).sum()), 12, dtype=torch.float64)
    tower = FrameTower(12, 16, 8).double()
    ran = {}
    try:
        # The thread's counting rate while the main thread sleeps (GIL free): counts -> seconds.
        start = counter[0]
        time.sleep(0.2)
        rate = max(1.0, (counter[0] - start) / 0.2)
        for name, call in (
            ("all_gather_rows", lambda: frameshard.all_gather_rows(torch.ones(2, 2), [2] * world, group)),
            ("shard_vision", lambda: frameshard.shard_vision(tower, pixel_values, grid, group, SHARD_ALL)),
        ):
            dist.barrier(group)
            if rank == world - 1:
                time.sleep(0.5)
            before, t0 = counter[0], time.monotonic()
            call()
            ran[name] = {"thread_ran_s": (counter[0] - before) / rate, "call_s": time.monotonic() - t0}
    finally:
        stop.set()
        thread.join()
    return {"during_call": ran}


def scenario_hf(family, rank, world, group):
    torch.manual_seed(11)
    model, visual, inputs = hf_models.build(family)
    model.double()
    inputs = {k: (v.double() if v.is_floating_point() else v) for k, v in inputs.items()}
    full_model = model is not visual

    def step():
        model.zero_grad()
        outs = hf_models.vision_outputs(model, visual, inputs)
        loss = sum((rank_weights(o, rank, 10 + i) * o).sum() for i, o in enumerate(outs))
        tensors = {"vision_%d" % i: o.detach() for i, o in enumerate(outs)}
        if full_model:
            # Videos go through the same vision module (get_video_features).
            video = model.model.get_video_features(
                pixel_values_videos=inputs["pixel_values"], video_grid_thw=inputs["image_grid_thw"]
            ).pooler_output
            video = torch.cat(list(video), dim=0)
            loss = loss + (rank_weights(video, rank, 4) * video).sum()
            tensors["video"] = video.detach()
            logits = model(**inputs).logits
            loss = loss + (rank_weights(logits, rank, 3) * logits).sum()
            tensors["logits"] = logits.detach()
        loss.backward()
        return tensors, reduced_grads(model, group)

    ref_out, ref_grads = step()
    seen = []
    hook = visual.patch_embed.register_forward_pre_hook(lambda _m, args: seen.append(int(args[0].shape[0])))
    try:
        hf.enable(model, group, SHARD_ALL)
        enabled = hf.is_enabled(model)
        out, grads = step()
        refused = []  # must raise on every rank alike
        pv, grid = inputs["pixel_values"], inputs["image_grid_thw"]
        for extra in ({"cu_seqlens": torch.zeros(2, dtype=torch.int32)}, {"return_dict": False}):
            try:
                visual(pv, grid_thw=grid, **extra)
                refused.append(None)
            except frameshard.FrameshardError as e:
                refused.append(str(e))
        hf.disable(model)
        restored = "forward" not in vars(visual)
        seen_sharded = list(seen)
        again = hf_models.vision_outputs(model, visual, inputs)
    finally:
        hook.remove()
    # The plan hf.enable makes: it costs this tower (frameshard.tower_dims of its config).
    plan = frameshard.plan(inputs["image_grid_thw"], world, SHARD_ALL, spatial_merge_size=2, tower=visual)
    return {
        "transformers": __import__("transformers").__version__,
        "enabled": enabled,
        "restored": restored,
        "refused": refused,
        "after_disable_diff": max(max_diff(a.detach(), ref_out["vision_%d" % i]) for i, a in enumerate(again)),
        **worker_common.parity_record(out, ref_out, grads, ref_grads),
        # Sharded: the vision module runs once per vision call (two with the full model).
        "seen_rows": seen_sharded,
        "plan_local_patch_rows": plan.ranks[rank].local_patch_rows,
        "total_patch_rows": plan.total_patch_rows,
        "path": plan.path,
    }


SCENARIOS = {
    "torch_tower_owner": scenario_torch_tower_owner,
    "torch_tower": scenario_torch_tower,
    "torch_tower_dummy": scenario_torch_tower_dummy,
    "gather": scenario_gather,
    "mismatch": scenario_mismatch,
    "grid_mismatch": scenario_grid_mismatch,
    "tower_error": scenario_tower_error,
    "gil": scenario_gil,
}
for _family in hf_models.FAMILIES:
    SCENARIOS["hf_" + _family] = lambda r, w, g, _f=_family: scenario_hf(_f, r, w, g)


if __name__ == "__main__":
    worker_common.main(SCENARIOS)
