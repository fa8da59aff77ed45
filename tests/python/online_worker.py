"""The rank side of test_online.py: cost_alpha="online" (frameshard/_online.py), one Gloo process
per rank (worker_common.main).

Scenarios:
  learns   a Python tower whose forward and backward burn known CPU time: a per-frame constant
           the FLOP model does not see, so FLOPs leave the small frames' rank the slowest. Six
           calls; each rank returns every call's plan (cost model, assignment, fingerprint) and
           what online_costs() says at the end.
  qwen3    hf.enable on a transformers Qwen3-VL tower with split frames and cost_alpha online:
           four training calls, the last against the replicated module (outputs and gradients).
  qwen3:<wrapper>  the same, the tower held as trainers hold it: fsdp2 (fully_shard before
           enable), ddp (enabled through the DDP wrapper), compile (torch.compile, eager backend),
           mesh (enabled over a 1-D DeviceMesh); bf16: the module and pixels in bfloat16, its
           outputs and gradients measured against a float64 step, as the replicated bf16 run's.
"""

import copy
import logging
import os
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import frameshard  # noqa: E402
import split_models  # noqa: E402
import split_worker  # noqa: E402
import train_worker  # noqa: E402
import worker_common  # noqa: E402
from frameshard import hf  # noqa: E402
from frameshard.hf import _family as registry  # noqa: E402

# The burning tower's truth, CPU seconds: per frame, and per patch row; backward twice forward.
FRAME_S = 1.5e-3
ROW_S = 2e-6
BACKWARD = 2.0
# One 32 x 32 image, then 12 small ones: by FLOPs the image is the work; by time the frames are.
LEARNS_GRID = [[1, 32, 32]] + [[1, 4, 4]] * 12
CALLS = 6


def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def frame_seconds(cu):
    rows = (cu[1:] - cu[:-1]).tolist()
    return sum(FRAME_S + ROW_S * p for p in rows)


class Burn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        burn(seconds)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        burn(BACKWARD * ctx.seconds)
        return grad, None


class BurningTower(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(split_models.FEATURES, 8, dtype=torch.float64)

    def forward(self, pixel_values, grid_thw, cu_seqlens):
        x = self.proj(pixel_values)
        x = Burn.apply(x, frame_seconds(cu_seqlens))
        return x.reshape(-1, 4, 8).sum(1)  # merge 2 x 2 patches into a token


def online_config(**fields):
    fields = {"cost_alpha": "online", **fields}
    return frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0, min_local_patch_rows=0, **fields)


def learns(rank, world, group):
    tower = BurningTower()
    grid = torch.tensor(LEARNS_GRID)
    pv = split_models.pixels(LEARNS_GRID)
    config = online_config()
    calls = []
    # A fresh tower object (a new key): the scenario's own model, whatever ran before.
    for _ in range(CALLS):
        out, plan = frameshard.shard_vision(tower, pv, grid, group, config, return_plan=True, timeout=60)
        (out * (rank + 1)).sum().backward()
        calls.append(dict(cost_model=plan.cost_model, assignment=plan.assignment, fingerprint=plan.fingerprint))
    state = frameshard.online_costs()["shard_vision"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "online.txt")
        text = frameshard.write_online_cost(path, "shard_vision")
        reread = frameshard.plan(LEARNS_GRID, world, online_config(cost_alpha=path)).cost_model
    return dict(calls=calls, state=state.__dict__, text=text, reread=reread)


class Paths(logging.Handler):
    """The path hf.enable's calls took, from frameshard's log (a line per change of path): the
    last call's, and whether any call cut frames."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages, self.path, self.split = [], "", False

    def emit(self, record):
        message = record.getMessage()
        self.messages.append(message)
        if ": sharded over " in message:
            # Any call that cut frames: the first (FLOPs) does; later the fit may learn that a
            # cut does not pay on this tiny tower, and stop cutting.
            self.path = "sharded"
            self.split = self.split or "frames cut across ranks" in message
        elif ": replicated on " in message:
            self.path, self.split = "replicated", False


def piece_sample(rank_plan):
    """(sum p^2, sum p, frames, K/V rows received) of a plan's rank as the split planner costs it,
    written from frameshard/split_plan.h: a piece of q rows of a p-row frame attends to all p."""
    cu = rank_plan["cu_seqlens"]
    whole = [h * w for t, h, w in rank_plan["grid"] for _ in range(t)]
    rows = [b - a for a, b in zip(cu[:-1], cu[1:], strict=True)]
    attends = list(rows)
    for frame, _, _ in rank_plan["pieces"]:
        attends[frame] = whole[frame]
    return [
        sum(q * p for q, p in zip(rows, attends, strict=True)),
        sum(rows),
        len(rows),
        sum(p - q for q, p in zip(rows, attends, strict=True)),
    ]


def wrapped(base, wrapper):
    """(what the trainer holds and calls, parameter ids whose gradients the wrapper averages over
    the group) for `wrapper` (None: the module itself)."""
    if wrapper in (None, "mesh"):
        return base, set()
    if wrapper == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        return fully_shard(base), set()  # DTensor gradients: train_worker.summed_grads
    if wrapper == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(base), {id(p) for p in base.parameters()}
    if wrapper == "compile":
        torch._dynamo.reset()
        return torch.compile(base, backend="eager"), set()
    raise ValueError(wrapper)


def cp_mesh(world):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (world,), mesh_dim_names=("cp",))


def qwen3(rank, world, group, wrapper=None):
    lowp = wrapper == "bf16"
    base = split_models.build("qwen3_vl")
    base = base.to(torch.bfloat16) if lowp else base
    grid, _ = split_worker.split_grid("mixed", world, base)
    pv = split_models.pixels(grid, dtype=next(base.parameters()).dtype)
    reference = copy.deepcopy(base)
    config = online_config(split_frames=True, split_exchange_cost=0, split_exchange_latency_us=0.0)
    held, averaged = wrapped(base, None if lowp else wrapper)
    # "mesh": enabled over a 1-D DeviceMesh ("cp") of the same ranks, as trainers pass theirs.
    hf.enable(held, cp_mesh(world) if wrapper == "mesh" else group, config, timeout=60)
    paths = Paths()
    logger = logging.getLogger("frameshard")
    level = logger.level
    logger.addHandler(paths)
    logger.setLevel(logging.DEBUG)
    samples = []  # of the split calls: this rank's sample, and the one its plan implies
    timed_backward = []
    for _ in range(4):
        base.zero_grad()
        out = split_models.outputs(held(pv, grid_thw=registry.tower_grid(registry.of_vision(base), torch.tensor(grid))))
        loss = sum((worker_common.rank_weights(o, rank, i) * o).sum() for i, o in enumerate(out))
        loss.backward()
        (online,) = [o for o in frameshard._online._STATES.values() if o.what == "hf.enable(%s)" % type(base).__name__]
        timed_backward.append(len(online.backward) == 2)  # its hooks saw the backward start and end
        if online.plan["split"]:
            samples.append((list(online.cost.sample(online.plan, rank, 1.0)), piece_sample(online.plan["ranks"][rank])))
    hf.disable(held)
    logger.removeHandler(paths)
    logger.setLevel(level)
    outs = {"out%d" % i: o.detach() for i, o in enumerate(out)}
    grads = train_worker.summed_grads(base, group, world, averaged)
    errors = {}
    # Each run's error against a float64 step of the same rounded weights and pixels, copied
    # before the replicated step gives `reference` gradients that the copy would carry.
    if lowp:
        exact_outs, exact_grads = split_worker.step(
            copy.deepcopy(reference).double(), pv.double(), grid, rank, group, False
        )
        errors = dict(
            out_err=worker_common.compare(outs, exact_outs)[0], grad_err=worker_common.compare(grads, exact_grads)[0]
        )
    ref_outs, ref_grads = split_worker.step(reference, pv, grid, rank, group, False)
    out_diff, out_scale = worker_common.compare(outs, ref_outs)
    grad_diff, grad_scale = worker_common.compare(grads, ref_grads)
    if lowp:
        errors.update(ref_out_err=worker_common.compare(ref_outs, exact_outs)[0])
        errors.update(ref_grad_err=worker_common.compare(ref_grads, exact_grads)[0])
    state = frameshard.online_costs()["hf.enable(%s)" % type(base).__name__]
    return dict(
        state=state.__dict__, path=paths.path, split=paths.split, logged=paths.messages, samples=samples,
        timed_backward=timed_backward, dtype=str(pv.dtype),
        out_diff=out_diff, out_scale=out_scale, grad_diff=grad_diff, grad_scale=grad_scale, **errors,
    )  # fmt: skip


SCENARIOS = {"learns": learns, "qwen3": qwen3}
for _wrapper in ("fsdp2", "ddp", "compile", "mesh", "bf16"):
    SCENARIOS["qwen3:" + _wrapper] = lambda r, w, g, _x=_wrapper: qwen3(r, w, g, _x)

if __name__ == "__main__":
    worker_common.main(SCENARIOS)
