#!/usr/bin/env python3
"""One rank of the multi-process tests of test_families.py (GLM-4V, Nemotron Omni and
PaddleOCR-VL through frameshard.hf.enable).

    python families_worker.py --rank R --world W --store FILE --out DIR [--scenarios a,b]

Joins a Gloo group over a FileStore, runs each scenario and writes DIR/rank<R>.json
(worker_common.main); the assertions live in test_families.py. Parity scenarios run one float64
step replicated, then the same step sharded, on the same rank: outputs, and every parameter
gradient after a SUM all-reduce over the group, with a rank-specific loss
(worker_common.rank_weights). The training scenarios ("<training>:<family>", scenario_training;
world 2 by default, scenarios_at) hold the model as a trainer does (DDP, FSDP2, torch.compile, HF
gradient checkpointing, bf16 parameters) and call only its forward, as a trainer's step does.
"""

import copy
import dataclasses
import os
import sys

import torch

import frameshard
from frameshard import hf
from frameshard.hf import _family as registry
from frameshard.hf import _patches

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_models as fm  # noqa: E402
import worker_common  # noqa: E402
from train_worker import summed_grads  # noqa: E402
from worker_common import compare, rank_weights, reduced_grads  # noqa: E402

# min_local_patch_rows stays at its default (96): the ranks get floor frames, which the local
# grid holds as one (count, h, w) row -- the row GLM-4V's vision module cannot take.
SHARD_ALL = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0)
GLM_VIDEO = [[3, 4, 4]]  # get_video_features: one (1, h, w) row per frame
OMNI_GRID = [[4, 6], [2, 2], [6, 4], [8, 8], [4, 4]]


def _weighted(tensors, rank):
    return sum((rank_weights(t, rank, 20 + i) * t).sum() for i, t in enumerate(tensors.values()))


def _parity(model, step, rank, group, hooked, plans):
    """Runs step() replicated, then sharded (hf.enable), each followed by backward of the
    rank-specific loss; returns the measurements (rows each call of `hooked` saw included)."""

    def run():
        model.zero_grad()
        tensors = step()
        _weighted(tensors, rank).backward()
        return {k: v.detach() for k, v in tensors.items()}, reduced_grads(model, group)

    ref_out, ref_grads = run()
    seen = []

    def record(_module, args, kwargs):
        pv = args[0] if args else kwargs["pixel_values"]  # PaddleOCR-VL: by keyword, [1, rows, C, p, p]
        seen.append(int(pv.shape[1] if pv.dim() == 5 else pv.shape[0]))

    hook = hooked.register_forward_pre_hook(record, with_kwargs=True)
    try:
        hf.enable(model, group, SHARD_ALL)
        enabled = hf.is_enabled(model)
        out, grads = run()
        disabled = hf.disable(model) and not hf.is_enabled(model)
    finally:
        hook.remove()
    out_diff, out_scale = compare(out, ref_out)
    grad_diff, grad_scale = compare(grads, ref_grads)
    return {
        "enabled": enabled,
        "disabled": disabled,
        "outputs": sorted(out),
        "out_diff": out_diff,
        "out_scale": out_scale,
        "grad_diff": grad_diff,
        "grad_scale": grad_scale,
        "params_with_grad": sum(1 for g in ref_grads.values() if float(g.abs().max()) > 0),
        "seen_rows": seen,
        "plan_rows": [p.ranks[rank].local_patch_rows for p in plans],
        "plan_real_rows": [p.ranks[rank].real_patch_rows for p in plans],
        "plan_dummy": [p.ranks[rank].dummy_frames for p in plans],
        "plan_pad": [p.ranks[rank].pad_frames for p in plans],
        "total_rows": [p.total_patch_rows for p in plans],
        "path": plans[0].path,
    }


def scenario_glm4v(rank, world, group):
    model, visual = fm.glm4v_model()
    grid = torch.tensor(fm.GLM_GRID)
    video = torch.tensor(GLM_VIDEO)
    pv, pv_video = fm.pixels(grid, fm.GLM_FEATURES), fm.pixels(video, fm.GLM_FEATURES, seed=6)
    ids, mm = fm.glm4v_prompt(grid)

    def step():
        feats = model.model.get_image_features(pixel_values=pv, image_grid_thw=grid).pooler_output
        vids = model.model.get_video_features(pixel_values_videos=pv_video, video_grid_thw=video).pooler_output
        logits = model(input_ids=ids, pixel_values=pv, image_grid_thw=grid, mm_token_type_ids=mm).logits
        return {"image": torch.cat(feats), "video": torch.cat(vids), "logits": logits}

    frames = registry.tower_grid(registry.get("glm4v"), video)  # what get_video_features passes
    plans = [frameshard.plan(g, world, SHARD_ALL, tower=visual) for g in (grid, frames, grid)]
    res = _parity(model, step, rank, group, visual.patch_embed, plans)
    res["family"] = registry.of_vision(visual).name
    return res


def scenario_glm4v_moe(rank, world, group):
    visual = fm.glm4v_moe_vision()
    grid = torch.tensor(fm.GLM_GRID)
    pv = fm.pixels(grid, fm.GLM_FEATURES)

    def step():
        return {"image": visual(pv, grid_thw=grid).pooler_output}

    plans = [frameshard.plan(grid, world, SHARD_ALL, tower=visual)]
    return _parity(visual, step, rank, group, visual.patch_embed, plans)


def _image_plan(model, grid_thw, world):
    """The plan hf.enable makes for these images (one (1, h, w) row each)."""
    cfg, dims = hf.plan_inputs(model, SHARD_ALL)
    return frameshard.plan(grid_thw, world, cfg, tower=dims, temporal_patch_size=1)


def scenario_omni(rank, world, group, grid=OMNI_GRID):
    model = fm.omni_model()
    grid = torch.tensor(grid)
    pv = fm.pixels(grid, fm.OMNI_FEATURES)
    ids = fm.omni_prompt(grid)

    sizes = []  # the pooler_output split of each get_image_features call

    def step():
        feats = model.get_image_features(pv, grid).pooler_output
        sizes.append([len(f) for f in feats])
        logits = model(input_ids=ids, pixel_values=pv, image_grid_hw=grid).logits
        return {"image": torch.cat(feats), "logits": logits}

    plan = _image_plan(model, torch.cat([torch.ones_like(grid[:, :1]), grid], dim=1), world)
    res = _parity(model, step, rank, group, model.vision_model, [plan, plan])
    res.update(cost_model=plan.cost_model, split_sizes=sizes, tokens=(grid.prod(-1) // 4).tolist())
    return res


def scenario_paddleocr(rank, world, group):
    model = fm.paddleocr_model()
    grid = torch.tensor(fm.GLM_GRID)
    pv = fm.pixels(grid, 3 * 4 * 4).reshape(-1, 3, 4, 4)  # the processor's [patches, C, p, p]
    ids, mm = fm.paddleocr_prompt(grid)
    sizes = []

    def step():
        feats = model.model.get_image_features(pixel_values=pv, image_grid_thw=grid).pooler_output
        sizes.append([len(f) for f in feats])
        logits = model(input_ids=ids, pixel_values=pv, image_grid_thw=grid, mm_token_type_ids=mm).logits
        return {"image": torch.cat(feats), "logits": logits}

    plan = _image_plan(model, grid, world)
    res = _parity(model, step, rank, group, model.model.visual, [plan, plan])
    res.update(cost_model=plan.cost_model, split_sizes=sizes, tokens=(grid.prod(-1) // 4).tolist())
    return res


def scenario_omni_few(rank, world, group):
    # Fewer images than ranks: world - 1 images, so a rank encodes a 2 x 2 placeholder image.
    return scenario_omni(rank, world, group, [[4, 4], [2, 6]][: world - 1])


def _raised(call):
    return worker_common.raised(call, Exception)  # the type and message are what the test checks


def scenario_omni_odd(rank, world, group):
    model = fm.omni_model()
    grid = torch.tensor([[4, 4], [3, 4], [2, 2]])
    pv = fm.pixels(grid, fm.OMNI_FEATURES)
    replicated = _raised(lambda: model.get_image_features(pv, grid))
    hf.enable(model, group, SHARD_ALL)
    sharded = _raised(lambda: model.get_image_features(pv, grid))
    return {"replicated": replicated, "sharded": sharded}


def scenario_mismatch(rank, world, group):
    # hf.enable with a cp_size the group does not have: every rank raises on the first call.
    model = fm.omni_model()
    grid = torch.tensor(OMNI_GRID)
    pv = fm.pixels(grid, fm.OMNI_FEATURES)
    hf.enable(model, group, SHARD_ALL, cp_size=world + 1)
    omni = _raised(lambda: model.get_image_features(pv, grid))
    visual = fm.glm4v_moe_vision()
    grid = torch.tensor(fm.GLM_GRID)
    hf.enable(visual, group, SHARD_ALL, cp_size=world + 1)
    glm = _raised(lambda: visual(fm.pixels(grid, fm.GLM_FEATURES), grid_thw=grid))
    return {"omni": omni, "glm": glm}


def scenario_static(rank, world, group):
    """What needs no collective but a transformers model (built here, where transformers is
    imported anyway, not in the pytest process): the cost models and what enable stores."""
    from transformers.models.glm4v import Glm4vVisionConfig

    glm = frameshard.tower_dims(Glm4vVisionConfig(**fm.GLM_VISION))
    moe = fm.glm4v_moe_vision()
    model = fm.omni_model()
    _, omni_dims = hf.plan_inputs(model)
    bare = dataclasses.replace(omni_dims, mergers=0, prefix_tokens=0)  # RADIO's blocks alone
    hf.enable(model, group, frameshard.FrameShardingConfig(enabled=True))
    stored = _patches.state(model, "features").config.cost_alpha
    patched = "get_image_features" in vars(model) and hf.is_enabled(model)
    restored = hf.disable(model) and "get_image_features" not in vars(model) and not hf.is_enabled(model)
    mesh = _raised(lambda: hf.enable(model, config=SHARD_ALL, mesh=frameshard.Mesh(None, 1, 1)))
    return {
        "glm_dims": glm.as_dict(),
        "glm_b": frameshard.cost_model(glm)["b"],
        "moe_dims_equal": frameshard.tower_dims(moe) == glm,
        "moe_family": registry.of_vision(moe).name,
        "omni_dims": omni_dims.as_dict(),
        "omni_cost": frameshard.cost_model(omni_dims),
        "radio_b": frameshard.cost_model(bare)["b"],
        "stored_alpha": stored,
        "patched": patched,
        "restored": restored,
        "mesh": mesh,
    }


# ------------------------------------------------- as trainers hold the models

# torch.compile of the whole model (Nemotron Omni: the compiled forward reaches the patched
# get_image_features, whose own frame is skipped, and the tower it calls back is compiled) or of
# the vision part assigned back (GLM-4V: sharded at the vision module's forward, as Qwen-VL;
# PaddleOCR-VL: its get_image_features finds the compiled vision model among its parts). Both
# forms for the two families sharded at get_image_features would cost 4-11 s of CPU more each.
COMPILE_WHOLE_MODEL = ("omni",)
# Run only when named (--scenarios; test_families.py: FRAMESHARD_TEST_SCENARIOS): aot_eager
# traces the joint forward and backward, twice the eager backend's time (9-17 s of CPU per rank
# and family); passed at world 2 and 3 for every family when run by hand.
BY_HAND = ("compile_aot_eager",)


class _Tiny:
    """One family's tiny model as the training scenarios use it: `model` (the whole
    ...ForConditionalGeneration) in `dtype`, `inputs` (its forward's keyword arguments: a prompt
    with every image's tokens), `owner` / `attr` where its vision part sits (what fully_shard and
    torch.compile wrap), `blocks` the vision part's layers, `hooked` the module whose forward
    pre-hook sees a vision call's pixel rows, and `plan(world)` the plan hf.enable makes."""

    def __init__(self, family, dtype):
        if family == "glm4v":
            model, visual = fm.glm4v_model()
            grid = torch.tensor(fm.GLM_GRID)
            ids, mm = fm.glm4v_prompt(grid)
            self.inputs = dict(input_ids=ids, pixel_values=fm.pixels(grid, fm.GLM_FEATURES), image_grid_thw=grid,
                               mm_token_type_ids=mm)  # fmt: skip
            self.owner, self.attr, self.blocks, self.hooked = model.model, "visual", visual.blocks, visual.patch_embed
            self.plan = lambda world: frameshard.plan(grid, world, SHARD_ALL, tower=visual)
        elif family == "omni":
            model = fm.omni_model()
            grid = torch.tensor(OMNI_GRID)
            pv = fm.pixels(grid, fm.OMNI_FEATURES)
            self.inputs = dict(input_ids=fm.omni_prompt(grid), pixel_values=pv, image_grid_hw=grid)
            radio = model.vision_model
            self.owner, self.attr, self.blocks, self.hooked = model, "vision_model", radio.encoder.layer, radio
            thw = torch.cat([torch.ones_like(grid[:, :1]), grid], dim=1)
            self.plan = lambda world: _image_plan(model, thw, world)
        else:
            model = fm.paddleocr_model()
            grid = torch.tensor(fm.GLM_GRID)
            ids, mm = fm.paddleocr_prompt(grid)
            pv = fm.pixels(grid, 3 * 4 * 4).reshape(-1, 3, 4, 4)  # the processor's [patches, C, p, p]
            self.inputs = dict(input_ids=ids, pixel_values=pv, image_grid_thw=grid, mm_token_type_ids=mm)
            visual = model.model.visual
            self.owner, self.attr, self.hooked = model.model, "visual", visual
            self.blocks = visual.vision_model.encoder.layers
            self.plan = lambda world: _image_plan(model, grid, world)
        self.model = model.to(dtype)
        self.inputs = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in self.inputs.items()}
        self.vision = getattr(self.owner, self.attr)


def _train_step(held, base, inputs, rank, world, group, averaged=()):
    """The trainer's step: the model's forward on the prompt (its one vision call inside), the
    rank's loss over the logits, backward; ({"logits": detached logits}, {parameter name:
    gradient summed over the group}, as train_worker.summed_grads takes them from `base`)."""
    base.zero_grad(set_to_none=True)
    logits = held(**inputs).logits
    (rank_weights(logits, rank, 30) * logits).sum().backward()
    return {"logits": logits.detach()}, summed_grads(base, group, world, averaged)


def scenario_training(training, family, rank, world, group):
    """One training step replicated (a plain copy of the model, frameshard off, no wrapper) and one
    sharded, the model held as `training` (fm.TRAINING) says; the measurements
    test_families.test_training_parity reads. bf16: both also against the float64 step of the
    same rounded weights and inputs."""
    tiny = _Tiny(family, torch.bfloat16 if training == "bf16" else torch.float64)
    model, inputs, vision = tiny.model, tiny.inputs, tiny.vision
    plain = copy.deepcopy(model)
    truth = None
    if training == "bf16":
        true_inputs = {k: (v.double() if v.is_floating_point() else v) for k, v in inputs.items()}
        truth = copy.deepcopy(model).double(), true_inputs
    held, averaged, extra = model, (), {}
    if training == "hf_ckpt":
        for m in (model, plain):
            m.train()
            m.gradient_checkpointing_enable()  # transformers 5: use_reentrant=False
        extra["checkpointing"] = all(b.gradient_checkpointing for b in tiny.blocks) and model.training
    elif training == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        # Nemotron Omni's video patch projection takes no part in an image step: DDP needs
        # find_unused_parameters for it, as a trainer of that model sets it.
        held = DDP(model, find_unused_parameters=family == "omni")
        averaged = {id(p) for p in model.parameters()}
        extra["held_class"] = type(held).__name__
    elif training == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import DTensor

        # As FSDP2 trainers apply it: every vision block, the vision part, then the whole model
        # (the root: language model, embeddings and, for the families sharded at
        # get_image_features, the projector). Only the model's forward is called: a root's
        # parameters are gathered in its forward.
        for block in tiny.blocks:
            fully_shard(block)
        fully_shard(vision)
        fully_shard(model)
        extra["vision_class"] = type(vision).__name__
        extra["dtensor_params"] = sum(isinstance(p, DTensor) for p in model.parameters())
    elif training.startswith("compile"):
        from torch import _dynamo

        _dynamo.reset()
        backend = "aot_eager" if training == "compile_aot_eager" else "eager"
        if family in COMPILE_WHOLE_MODEL:
            held = torch.compile(model, backend=backend)
            extra["compiled_class"] = type(held).__name__
        else:
            setattr(tiny.owner, tiny.attr, torch.compile(vision, backend=backend))
            extra["compiled_class"] = type(getattr(tiny.owner, tiny.attr)).__name__
    seen = []

    def record(_module, args, kwargs):
        pv = args[0] if args else kwargs["pixel_values"]  # PaddleOCR-VL: by keyword, [1, rows, C, p, p]
        seen.append(int(pv.shape[1] if pv.dim() == 5 else pv.shape[0]))

    ref_out, ref_grads = _train_step(plain, plain, inputs, rank, world, group)
    # Registered before the first compiled call (a hook added later would make dynamo retrace).
    hook = tiny.hooked.register_forward_pre_hook(record, with_kwargs=True)
    try:
        hf.enable(held, group, SHARD_ALL)
        enabled = hf.is_enabled(held)
        out, grads = _train_step(held, model, inputs, rank, world, group, averaged)
        disabled = hf.disable(held) and not hf.is_enabled(held)
    finally:
        hook.remove()
    plan = tiny.plan(world)
    out_diff, out_scale = compare(out, ref_out)
    grad_diff, grad_scale = compare(grads, ref_grads)
    res = {
        "enabled": enabled,
        "disabled": disabled,
        "path": plan.path,
        "out_diff": out_diff,
        "out_scale": out_scale,
        "grad_diff": grad_diff,
        "grad_scale": grad_scale,
        "params": len(grads),
        "model_params": sum(1 for _ in model.parameters()),
        "params_with_grad": sum(1 for g in ref_grads.values() if float(g.abs().max()) > 0),
        "seen_rows": seen,
        "plan_rows": [plan.ranks[rank].local_patch_rows],
        "plan_real_rows": plan.ranks[rank].real_patch_rows,
        "total_rows": plan.total_patch_rows,
        "dtype": str(out["logits"].dtype),
        **extra,
    }
    if truth is not None:
        true_out, true_grads = _train_step(truth[0], truth[0], truth[1], rank, world, group)
        res.update(
            out_err=compare(out, true_out)[0],
            ref_out_err=compare(ref_out, true_out)[0],
            grad_err=compare(grads, true_grads)[0],
            ref_grad_err=compare(ref_grads, true_grads)[0],
        )
    if training.startswith("compile"):
        from torch._dynamo.utils import counters

        res["graphs"] = int(counters["stats"]["unique_graphs"])  # the model's code was compiled
    return res


SCENARIOS = {
    "static": scenario_static,
    "glm4v": scenario_glm4v,
    "glm4v_moe": scenario_glm4v_moe,
    "omni": scenario_omni,
    "omni_few": scenario_omni_few,
    "paddleocr": scenario_paddleocr,
    "omni_odd": scenario_omni_odd,
    "mismatch": scenario_mismatch,
}
for _training in fm.TRAINING:
    for _family in fm.TRAIN_FAMILIES:
        SCENARIOS["%s:%s" % (_training, _family)] = lambda r, w, g, _t=_training, _f=_family: scenario_training(
            _t, _f, r, w, g
        )


def scenarios_at(world):
    """The scenarios a launch at `world` ranks runs by default: the training ones at world 2 only
    (CI's time; the uneven split of world 3 goes through the same sharded path, which the
    parity scenarios run at world 3), those of BY_HAND only when named."""
    training = [n for n in SCENARIOS if ":" in n]
    return [n for n in SCENARIOS if n not in training] + [
        n for n in training if world == 2 and n.split(":")[0] not in BY_HAND
    ]


if __name__ == "__main__":
    worker_common.main(SCENARIOS, scenarios_at)
