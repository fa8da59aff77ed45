#!/usr/bin/env python3
"""One rank of test_device_mesh.py: a torch DeviceMesh wherever frameshard takes a group.

    python device_mesh_worker.py --rank R --world W --store FILE --out DIR [--scenarios a,b]

World 2: a 1-D mesh ("cp") for hf.enable (Qwen2.5-VL), hf.context_parallel (Qwen2-VL) and
calibrate_exchange. World 4: a 2-D ("dp", "cp") mesh with mesh_dims [dp, cp] for hf.enable
(Qwen3-VL, replica 1 text-only) with FSDP2 (HSDP) over the same mesh. Every parity scenario
compares against the unsharded model on the same rank, in float64: outputs, and every parameter
gradient after a SUM all-reduce over the world.
"""

import copy
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import frameshard
from frameshard import hf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
import worker_common  # noqa: E402
from package_worker import SHARD_ALL, SHARD_NO_FLOOR  # noqa: E402
from worker_common import compare, rank_weights, reduced_grads  # noqa: E402

MESH_DP_CP = frameshard.FrameShardingConfig(
    enabled=True, min_tokens=0, min_frames=0, min_local_patch_rows=0, mesh_dims=["dp", "cp"]
)


def _model(family):
    torch.manual_seed(11)
    model, visual, inputs = hf_models.build(family)
    model.double()
    return model, visual, {k: (v.double() if v.is_floating_point() else v) for k, v in inputs.items()}


def _vision_step(model, visual, inputs, rank, group, grads_of=None):
    model.zero_grad()
    outs = hf_models.vision_outputs(model, visual, inputs)
    loss = sum((rank_weights(o, rank, 10 + i) * o).sum() for i, o in enumerate(outs))
    loss.backward()
    tensors = {"vision_%d" % i: o.detach() for i, o in enumerate(outs)}
    return tensors, (grads_of or reduced_grads)(model, group)


def _result(out, ref_out, grads, ref_grads, **extra):
    out_diff, out_scale = compare(out, ref_out)
    grad_diff, grad_scale = compare(grads, ref_grads)
    return dict(out_diff=out_diff, out_scale=out_scale, grad_diff=grad_diff, grad_scale=grad_scale, **extra)


def scenario_hf_1d(rank, world, group):
    """hf.enable(model, a 1-D DeviceMesh): the mesh's only dimension is the CP group."""
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("cp",))
    model, visual, inputs = _model("qwen2_5_vl")
    ref_out, ref_grads = _vision_step(model, visual, inputs, rank, group)
    seen = []
    hook = visual.patch_embed.register_forward_pre_hook(lambda _m, args: seen.append(int(args[0].shape[0])))
    hf.enable(model, mesh, SHARD_ALL)
    try:
        out, grads = _vision_step(model, visual, inputs, rank, group)
    finally:
        hf.disable(model)
        hook.remove()
    total = int(inputs["image_grid_thw"].prod(-1).sum())
    return _result(out, ref_out, grads, ref_grads, path="sharded" if max(seen) < total else "replicated")


def scenario_cp_1d(rank, world, group):
    """hf.context_parallel(model, a 1-D DeviceMesh): the ranks' losses sum to the unsharded loss
    and the SUM-all-reduced gradients equal the unsharded ones."""
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("cp",))
    model, _visual, inputs = _model("qwen2_vl")
    labels = inputs["input_ids"]
    model.zero_grad()
    ref_loss = model(**inputs, labels=labels).loss
    ref_loss.backward()
    ref_grads = {n: p.grad.clone() if p.grad is not None else torch.zeros_like(p) for n, p in model.named_parameters()}
    cp = hf.context_parallel(model, mesh)
    try:
        model.zero_grad()
        loss = cp(**inputs, labels=labels).loss
        loss.backward()
        grads = reduced_grads(model, group)
        total = loss.detach().clone()
        dist.all_reduce(total, group=group)
    finally:
        cp.remove()
    return _result(
        {"loss": total.view(1)}, {"loss": ref_loss.detach().view(1)}, grads, ref_grads, path="sharded", cp=cp.cp_size
    )


def scenario_calibrate_exchange(rank, world, group):
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("cp",))
    us = frameshard.calibrate_exchange(mesh, layers=1, repeats=1)
    values = [None] * world
    dist.all_gather_object(values, us, group=group)
    return {"us": us, "all": values}


def reduced_grads_one(grad, group):
    g = grad.clone()
    dist.all_reduce(g, group=group)
    return g


def scenario_calibrate_disagree(rank, world, group):
    """Ranks passing calibrate_exchange different arguments raise at once, on every rank (not
    after the group's timeout in a mismatched collective)."""
    start = time.monotonic()
    try:
        frameshard.calibrate_exchange(group, layers=1 + rank, repeats=1)
        message = None
    except frameshard.FrameshardError as e:
        message = str(e)
    return {"message": message, "seconds_to_raise": time.monotonic() - start}


def _fsdp2_grads(model, group):
    """The FSDP2 (HSDP) gradients of `model` as full tensors, times the world: FSDP2 averages over
    the mesh, the reference SUMs."""
    grads = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            grads[name] = torch.zeros(p.shape, dtype=p.dtype)
        elif hasattr(p.grad, "full_tensor"):  # a DTensor shard of an FSDP2 parameter
            grads[name] = p.grad.full_tensor() * dist.get_world_size(group)
        else:  # outside the vision part: not FSDP2's, unused by the vision loss
            grads[name] = reduced_grads_one(p.grad, group)
    return grads


def scenario_hf_2d_fsdp2(rank, world, group):
    """hf.enable(model, a ("dp", "cp") DeviceMesh, mesh_dims [dp, cp]) with FSDP2 over the same
    mesh (HSDP: sharded over cp, replicated over dp). Replica 0 encodes the fixture's images;
    replica 1 is text-only and joins with hf.join_without_media."""
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "cp"))
    text_only = mesh.get_coordinate()[0] == 1
    model, visual, inputs = _model("qwen3_vl")
    model.zero_grad()
    ref_out = {}
    if not text_only:
        ref_out, _ = _vision_step(model, visual, inputs, rank, group, grads_of=lambda m, g: {})
    ref_grads = reduced_grads(model, group)
    sharded, visual = _model("qwen3_vl")[:2]
    hf.enable(sharded, mesh, MESH_DP_CP)
    for block in visual.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(visual, mesh=mesh)  # the vision part: its own forward unshards what it holds
    if text_only:
        loss, out = hf.join_without_media(sharded), {}
        loss.backward()
    else:
        out, _ = _vision_step(sharded, visual, inputs, rank, group, grads_of=lambda m, g: {})
    grads = _fsdp2_grads(sharded, group)
    hf.disable(sharded)
    return _result(out, ref_out, grads, ref_grads, path="sharded", text_only=text_only)


def scenario_errors(rank, world, group):
    """Refused alike on every rank, before any collective."""
    one = init_device_mesh("cpu", (world,), mesh_dim_names=("cp",))
    other = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    model, visual, _ = _model("qwen2_vl")
    messages = []
    for call in (
        lambda: hf.enable(model, one, MESH_DP_CP),  # no "dp" dimension
        lambda: hf.enable(model, other, SHARD_NO_FLOOR),  # a 1-D mesh of another name is the CP group
        lambda: hf.enable(model, one, SHARD_NO_FLOOR, cp_size=world + 1),
        lambda: hf.enable(model, "cp", SHARD_NO_FLOOR),
        lambda: hf.context_parallel(model, 2),
        lambda: frameshard.shard_vision(visual, torch.zeros(4, 8), [[1, 2, 2]], object()),
    ):
        try:
            call()
            messages.append(None)
        except frameshard.FrameshardError as e:
            messages.append(str(e))
        hf.disable(model)
    return {"messages": messages}


# How trainers hold a context-parallel model, each with the gradient reduction it implies, and the
# grad_scale the handle must find for it. dp = world / 2 replicas of cp = 2 ranks.
WRAPPERS = ("fsdp2_flat", "hsdp", "fsdp2_divide", "ddp", "ddp_after", "fsdp2_cp", "ddp_dp")


def _wrap(model, kind, mesh, flat):
    """`model` held as `kind`: what context_parallel is given (the DDP object, or the model)."""
    from torch.distributed.fsdp import FSDPModule, fully_shard
    from torch.nn.parallel import DistributedDataParallel

    if kind.startswith("ddp"):
        group = mesh.get_group("dp") if kind == "ddp_dp" else flat.get_group()
        return DistributedDataParallel(model, process_group=group)
    over = {"hsdp": mesh, "fsdp2_cp": mesh["cp"]}.get(kind, flat)
    for block in [*model.model.visual.blocks, *model.model.language_model.layers]:
        fully_shard(block, mesh=over)
    fully_shard(model, mesh=over)
    if kind == "fsdp2_divide":  # the divisor the CP shares need; SUM comms (Gloo has no PREMUL_SUM)
        for module in model.modules():  # the setters act on one module's parameters each
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(float(mesh.size(0)))
                module.set_force_sum_reduction_for_comms(True)
    return model


def scenario_cp_wrappers(rank, world, group):
    """hf.context_parallel on a model held by FSDP2 (over dp x cp flattened, HSDP over (dp, cp),
    dp x cp with divide factor dp, over cp alone at dp 1) or DDP (over dp x cp; over dp alone,
    which must raise): one step's gradients, as the wrapper leaves them, against the unsharded
    model's averaged over the replicas (each replica its own batch), float64."""
    import cp_lm_worker

    dp = world // 2
    mesh = init_device_mesh("cpu", (dp, 2), mesh_dim_names=("dp", "cp"))
    flat = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_cp",))
    replica = rank // 2
    results = {}
    for kind in WRAPPERS:
        if kind == "fsdp2_cp" and dp > 1:  # the replicas would need their own reduction too
            continue
        model, inputs, labels = cp_lm_worker.batch("qwen2_vl", tail=5 * replica)
        reference = copy.deepcopy(model)
        cp_lm_worker.reference_step(reference, inputs, labels)
        ref_grads = {n: g / world for n, g in reduced_grads(reference, group).items()}  # mean of replicas
        try:
            if kind == "ddp_after":  # DDP made after context_parallel and called directly
                cp = hf.context_parallel(model, mesh["cp"], timeout=60)
                cp.loss(_wrap(model, "ddp", mesh, flat)(**inputs).logits, labels).backward()
            else:
                cp = hf.context_parallel(_wrap(model, kind, mesh, flat), mesh["cp"], timeout=60)
                cp(**inputs, labels=labels).loss.backward()
        except frameshard.FrameshardError as e:
            results[kind] = {"error": str(e)}
            continue
        grads = {}
        for name, p in model.named_parameters():
            g = p.grad if p.grad is not None else torch.zeros(p.shape, dtype=p.dtype)
            grads[name] = g.full_tensor() if hasattr(g, "full_tensor") else g
        grads = {n.removeprefix("module."): g for n, g in grads.items()}
        diff, scale = compare(grads, ref_grads)
        results[kind] = {"grad_diff": diff, "grad_scale": scale, "loss_scale": cp.grad_scale}
    return {"wrappers": results, "dp": dp}


SCENARIOS = {
    "hf_1d": scenario_hf_1d,
    "cp_1d": scenario_cp_1d,
    "calibrate_exchange": scenario_calibrate_exchange,
    "calibrate_disagree": scenario_calibrate_disagree,
    "hf_2d_fsdp2": scenario_hf_2d_fsdp2,
    "cp_wrappers": scenario_cp_wrappers,
    "errors": scenario_errors,
}


def default(world):
    if world == 4:
        return ["hf_2d_fsdp2", "cp_wrappers"]
    return ["hf_1d", "cp_1d", "calibrate_exchange", "calibrate_disagree", "errors", "cp_wrappers"]


if __name__ == "__main__":
    worker_common.main(SCENARIOS, default)
