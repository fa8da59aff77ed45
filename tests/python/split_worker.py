"""The rank side of test_hf_split.py: split frames (split_frames) in transformers vision towers
and in a Python tower that takes pieces, one Gloo process per rank (worker_common.main).

Scenarios (each one training step, sharded against replicated on the same rank, loss weights per
rank, gradients SUM-all-reduced over the group; the plan must cut a frame):

  <family>:one     one 16 x 16 image, cut over every rank
  <family>:mixed   a cut 16 x 16 image between two whole ones
  <family>:video   a video (3 frames) whose frames are cut (the first grid of VIDEO_GRIDS that the
                   plan cuts at this world)
  <family>:exact   the mixed batch with sdpa attention and rotary in float64 (float64_rotary):
                   without transformers' float32 rotary and eager softmax
  <family>:bf16    the mixed batch in bfloat16 parameters and pixels: errors against a float64
                   run of the same rounded weights, for the sharded and the replicated run
  user:<case>      a pure-torch tower taking pieces (UserTower), float64
  raise            rank 1's tower raises between two exchanges: every rank must raise
  refuse           split_frames with a tower that does not take pieces: the error
  latency          frameshard.calibrate_exchange: one figure on every rank
"""

import contextlib
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import frameshard  # noqa: E402
import split_models  # noqa: E402
import worker_common  # noqa: E402
from frameshard import hf  # noqa: E402
from frameshard.hf import _family as registry  # noqa: E402

GRIDS = {
    "one": [[[1, 16, 16]]],
    "mixed": [[[1, 4, 4], [1, 16, 16], [1, 4, 8]]],
    "video": [[[1, 4, 4], [3, 12, 12]], [[1, 4, 4], [3, 16, 16]], [[3, 16, 16], [1, 8, 8]], [[2, 16, 16], [1, 8, 4]]],
}
CASES = ("one", "mixed", "video")
TIMEOUT_S = 60


def config():
    # No exchange cost or latency: the tiny towers' rows cost less than a realistic K/V row (and
    # exchange) would, which would forbid every cut. No floor padding: the pieces are tested.
    return frameshard.FrameShardingConfig(
        enabled=True,
        min_tokens=0,
        min_frames=0,
        min_local_patch_rows=0,
        split_frames=True,
        split_exchange_cost=0,
        split_exchange_latency_us=0.0,
    )


def split_grid(case, world, tower):
    """The first grid of the case that the plan cuts at `world` (the same on every rank)."""
    for grid in GRIDS[case]:
        plan = frameshard.plan(grid, world, config(), tower=tower)
        if plan.split:
            return grid, plan
    raise AssertionError("no %s grid is cut at world %d" % (case, world))


def step(visual, pv, grid, rank, group, enable):
    """Outputs and all-reduced gradients of one step; `enable`: through hf.enable."""
    if enable:
        hf.enable(visual, group, config(), timeout=TIMEOUT_S)
    # GLM-4V takes one (1, h, w) row per frame (hf.tower_grid), as its get_video_features passes.
    out = split_models.outputs(visual(pv, grid_thw=registry.tower_grid(registry.of_vision(visual), torch.tensor(grid))))
    loss = sum((worker_common.rank_weights(o, rank, i) * o).sum() for i, o in enumerate(out))
    loss.backward()
    if enable:
        hf.disable(visual)
    outs = {"out%d" % i: o.detach() for i, o in enumerate(out)}
    return outs, worker_common.reduced_grads(visual, group)


def plan_facts(plan, rank):
    return {
        "path": "sharded" if plan.sharded else "replicated",
        "split": bool(plan.split),
        "pieces": sum(len(r.pieces) for r in plan.ranks),
        "my_pieces": len(plan.ranks[rank].pieces),
    }


@contextlib.contextmanager
def float64_rotary(visual):
    """The module's apply_rotary_pos_emb_vision in the tensors' own dtype (transformers rotates in
    float32 even in a float64 model), in both runs: then only float64 roundings differ."""
    module = sys.modules[type(visual.blocks[0].attn).__module__]
    original = module.apply_rotary_pos_emb_vision

    def rotary(q, k, cos, sin):
        cos, sin = cos.unsqueeze(-2).to(q.dtype), sin.unsqueeze(-2).to(q.dtype)
        return q * cos + module.rotate_half(q) * sin, k * cos + module.rotate_half(k) * sin

    module.apply_rotary_pos_emb_vision = rotary
    try:
        yield
    finally:
        module.apply_rotary_pos_emb_vision = original


def hf_parity(family, case, exact=False):
    def run(rank, world, group):
        base = split_models.build(family, attn="sdpa" if exact else "eager")
        grid, plan = split_grid(case, world, base)
        pv = split_models.pixels(grid)
        with float64_rotary(base) if exact else contextlib.nullcontext():
            ref_out, ref_grads = step(copy.deepcopy(base), pv, grid, rank, group, False)
            out, grads = step(base, pv, grid, rank, group, True)
        out_diff, out_scale = worker_common.compare(out, ref_out)
        grad_diff, grad_scale = worker_common.compare(grads, ref_grads)
        restored = "forward" not in base.blocks[0].attn.__dict__ and not hf.is_enabled(base)
        return dict(
            plan_facts(plan, rank), out_diff=out_diff, out_scale=out_scale, grad_diff=grad_diff,
            grad_scale=grad_scale, restored=restored, grid=grid,
        )  # fmt: skip

    return run


def hf_bf16(family):
    def run(rank, world, group):
        base = split_models.build(family).to(torch.bfloat16)
        grid, plan = split_grid("mixed", world, base)
        pv = split_models.pixels(grid, dtype=torch.bfloat16)
        exact_out, exact_grads = step(copy.deepcopy(base).double(), pv.double(), grid, rank, group, False)
        rep_out, rep_grads = step(copy.deepcopy(base), pv, grid, rank, group, False)
        out, grads = step(base, pv, grid, rank, group, True)
        res = plan_facts(plan, rank)
        res["out_scale"] = worker_common.compare(exact_out, exact_out)[1]
        res["grad_scale"] = worker_common.compare(exact_grads, exact_grads)[1]
        res["rep_out_err"] = worker_common.compare(rep_out, exact_out)[0]
        res["rep_grad_err"] = worker_common.compare(rep_grads, exact_grads)[0]
        res["out_err"] = worker_common.compare(out, exact_out)[0]
        res["grad_err"] = worker_common.compare(grads, exact_grads)[0]
        return res

    return run


class UserTower(torch.nn.Module):
    """A user's own tower taking pieces: patch projection, 2 blocks of single-head full attention
    (learned absolute position of each patch row from the whole frame's (h, w) coordinates), a
    2 x 2 merge. It keeps the contract of frameshard.shard_vision: positions from the whole
    frame, one exchange per attention layer on every rank, pieces attend to the whole frame."""

    def __init__(self, features=split_models.FEATURES, dim=16, side=16):
        super().__init__()
        self.embed = torch.nn.Linear(features, dim)
        self.pos = torch.nn.Embedding(side * side, dim)
        self.qkv = torch.nn.ModuleList([torch.nn.Linear(dim, 3 * dim) for _ in range(2)])
        self.merge = torch.nn.Linear(4 * dim, dim)
        self.side = side

    def positions(self, grid, pieces):
        """The (h, w) index of every local row, in the processor's merge-block order, from the
        whole frame; a piece keeps its rows only."""
        by_frame = {p.frame: p for p in pieces}
        ids, frame = [], 0
        for t, h, w in grid.tolist():
            hh, ww = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            block = lambda x: x.reshape(h // 2, 2, w // 2, 2).transpose(1, 2).flatten()  # noqa: E731, B023
            whole = block(hh) * self.side + block(ww)
            for _ in range(t):
                p = by_frame.get(frame)
                ids.append(whole[p.begin : p.end] if p is not None else whole)
                frame += 1
        return torch.cat(ids)

    def forward(self, pixel_values, grid_thw, cu_seqlens, *, pieces, exchange):
        x = self.embed(pixel_values) + self.pos(self.positions(grid_thw, pieces))
        cu = cu_seqlens.tolist()
        slot = {p.frame: j for j, p in enumerate(pieces)}
        for qkv in self.qkv:
            q, k, v = qkv(x).chunk(3, dim=1)
            kv = torch.cat([k, v], dim=1)
            outs = exchange(kv) if exchange is not None else [kv]
            rows = []
            for s in range(len(cu) - 1):
                a, b = cu[s], cu[s + 1]
                whole = outs[1 + slot[s]] if s in slot else outs[0][a:b]
                keys, values = whole.chunk(2, dim=1)
                rows.append(torch.softmax(q[a:b] @ keys.T / 4.0, dim=-1) @ values)
            x = x + torch.cat(rows)
        return self.merge(x.reshape(-1, 4 * x.shape[1]))


def user_parity(case):
    def run(rank, world, group):
        torch.manual_seed(7)
        base = UserTower().double()
        grid = GRIDS[case][0]
        cfg = config()
        plan = frameshard.plan(grid, world, cfg)
        pv = split_models.pixels(grid)
        grid_t = torch.tensor(grid)
        ref = copy.deepcopy(base)
        ref_out = ref(pv, grid_t, frameshard_cu(grid), pieces=(), exchange=None)
        (worker_common.rank_weights(ref_out, rank, 0) * ref_out).sum().backward()
        out = frameshard.shard_vision(base, pv, grid_t, group, cfg, timeout=TIMEOUT_S)
        (worker_common.rank_weights(out, rank, 0) * out).sum().backward()
        out_diff, out_scale = worker_common.compare({"o": out.detach()}, {"o": ref_out.detach()})
        grad_diff, grad_scale = worker_common.compare(
            worker_common.reduced_grads(base, group), worker_common.reduced_grads(ref, group)
        )
        return dict(
            plan_facts(plan, rank), out_diff=out_diff, out_scale=out_scale, grad_diff=grad_diff, grad_scale=grad_scale
        )

    return run


def frameshard_cu(grid):
    lengths = [h * w for t, h, w in grid for _ in range(t)]
    return torch.tensor([0] + lengths).cumsum(0).to(torch.int32)


def raises(rank, world, group):
    """Rank 1 raises inside its tower between the first and the second full-attention layer."""
    visual = split_models.build("qwen3_vl")  # 3 full-attention blocks
    grid, _ = split_grid("one", world, visual)
    if rank == 1:

        def boom(*args, **kwargs):
            raise ValueError("boom in block 1")

        visual.blocks[1].mlp.forward = boom
    hf.enable(visual, group, config(), timeout=TIMEOUT_S)
    try:
        visual(split_models.pixels(grid), grid_thw=torch.tensor(grid))
    except frameshard.FrameshardError as e:
        return {"error_type": type(e).__name__, "error_text": str(e)}
    return {"error_type": None, "error_text": ""}


def refuses(rank, world, group):
    def tower(pv, grid, cu):
        return pv[: pv.shape[0] // 4]

    grid = GRIDS["one"][0]
    try:
        frameshard.shard_vision(tower, split_models.pixels(grid), grid, group, config(), timeout=TIMEOUT_S)
    except frameshard.FrameshardError as e:
        return {"error_text": str(e)}
    return {"error_text": ""}


def latency(rank, world, group):
    """frameshard.calibrate_exchange on the group: every rank gets the same figure."""
    us = frameshard.calibrate_exchange(group, layers=4, repeats=3, clock="wall", timeout=TIMEOUT_S)
    return {"us": us}


SCENARIOS = {}
for _family in split_models.FAMILIES:
    for _case in CASES:
        SCENARIOS["%s:%s" % (_family, _case)] = hf_parity(_family, _case)
    SCENARIOS["%s:exact" % _family] = hf_parity(_family, "mixed", exact=True)
    SCENARIOS["%s:bf16" % _family] = hf_bf16(_family)
for _case in CASES:
    SCENARIOS["user:%s" % _case] = user_parity(_case)
SCENARIOS["raise"] = raises
SCENARIOS["refuse"] = refuses
SCENARIOS["latency"] = latency

# Worlds above 2 (uneven pieces, a rank without pieces next to ranks with two) run the families
# whose vision code differs: the MoE vision modules run the dense ones' code (the same attention,
# rotary and forward source in transformers 5.24) and Qwen3.5 is Qwen3-VL without DeepStack.
# --scenarios all (test_hf_split.py: FRAMESHARD_TEST_SCENARIOS=all) runs every family there too.
UNEVEN_WORLD_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v")


# World 4 (four rank processes on CI's two cores) runs each case once on Qwen3-VL (DeepStack: the
# most outputs to gather) and the window tower's cut on Qwen2.5-VL, the user tower, and the error.
WORLD4 = ("qwen3_vl:one", "qwen3_vl:mixed", "qwen3_vl:video", "qwen3_vl:exact", "qwen3_vl:bf16",
          "qwen2_5_vl:mixed", "user:one", "user:mixed", "user:video", "raise")  # fmt: skip


def default(world):
    if world >= 4:
        return list(WORLD4)
    return [n for n in SCENARIOS if world == 2 or n.split(":")[0] not in split_models.FAMILIES
            or n.split(":")[0] in UNEVEN_WORLD_FAMILIES]  # fmt: skip


if __name__ == "__main__":
    worker_common.main(SCENARIOS, default)
