"""Hugging Face adapters: one line gives a transformers VLM sharded vision (and, optionally,
context parallelism in its language model).

    frameshard.hf.enable(model, group_or_device_mesh, frameshard._config.FrameShardingConfig(enabled=True))
    ...  # get_image_features / get_video_features, model(...), loss.backward() as before
    frameshard.hf.disable(model)

Supported families (one module each in frameshard/hf/_families; `families()` lists them): Qwen2-VL,
Qwen2.5-VL, Qwen3-VL(-MoE), Qwen3.5(-MoE) and GLM-4.1V / 4.5V(-MoE) are sharded at their vision
module (its forward runs on this rank's frames); Nemotron Omni and PaddleOCR-VL, whose merge lives
outside the vision module, at the model's get_image_features (encoder to projector, per image).
A model is recognised by its class hierarchy, so a subclass or FSDP2's `FSDP<Class>` counts, and
may be held however a trainer holds it: torch.compile, DDP, FSDP1/2, checkpoint_wrapper and PEFT
are seen through, at the top or at `.visual` / `.model.visual`. transformers releases in
SUPPORTED_TRANSFORMERS are supported; another is refused at `enable` by name.

The group: a ProcessGroup, a torch DeviceMesh (the config's `mesh_dims` names its dimensions:
["cp"] its "cp" dimension or a 1-D mesh; ["dp", "cp"] balances every DP replica's frames over the
dp x cp ranks), a frameshard.Mesh, or None (the default group). Anything else is refused at
`enable`. Every patch is on the model's instances, recorded in one registry with one undo
(`disable`, `remove_context_parallel`). The path each call takes (sharded or replicated, split or
not, and why) is logged on logger "frameshard" at INFO, once per change.

The forward calls are collective over the group: every rank runs the vision module on the same
pixel_values and grid_thw (as CP ranks of one microbatch do); with ["dp", "cp"] each rank on its
own replica's, and a replica without media adds `join_without_media(model)` to its loss once per
vision call the others make. See docs/python.md.
"""

from __future__ import annotations

import types as _types
from typing import Any as _Any

import torch as _torch

from .. import _calibrate, _config, _groups, _towers, _unwrap
from .._C import FrameshardError
from . import _compat, _cp_owner, _families, _family, _features, _patches, _split, _vision  # noqa: F401  (_families, _cp_owner register)
from ._compat import SUPPORTED_TRANSFORMERS
from ._cp import ContextParallel, context_parallel
from ._cp import remove as remove_context_parallel
from ._family import families


def _candidates(model: _Any) -> list:
    root = _unwrap.unwrap_module(model)
    inner = getattr(root, "model", None)
    found = [root, getattr(root, "visual", None), getattr(inner, "visual", None) if inner is not None else None]
    return [_unwrap.unwrap_module(c) for c in found if c is not None]


def _features_model(model: _Any) -> tuple[_torch.nn.Module, _family.Family] | None:
    """(the module whose get_image_features is sharded, its family), or None."""
    root = _unwrap.unwrap_module(model)
    for candidate in (root, getattr(root, "model", None)):
        family = _family.of_features(candidate)
        if family is not None:
            return candidate, family
    return None


def find_vision_module(model: _Any, *, fn: str = "find_vision_module") -> _torch.nn.Module:
    """The supported whole-tower vision module of `model` (a ...ForConditionalGeneration, its
    `.model`, the vision module itself, or any of them wrapped), unwrapped; FrameshardError
    (naming `fn`) when there is none."""
    for c in _candidates(model):
        if _family.of_vision(c) is not None:
            return c
    root = _unwrap.unwrap_module(model)
    inner = getattr(root, "model", None)
    nested = [c for c in (getattr(root, "visual", None), getattr(inner, "visual", None)) if c is not None]
    raise FrameshardError(
        "frameshard.hf.%s: expected a transformers model of a supported family or its vision module "
        "(a subclass of %s; torch.compile, DDP, FSDP, checkpoint_wrapper and PEFT wrappers are seen "
        "through), got %s%s; pass the model or its vision module (for another wrapper, the model "
        "it wraps; for %s the model)"
        % (
            fn,
            ", ".join(_family.class_names("vision") + _family.class_names("features")),
            _unwrap.describe(model),
            " with vision module %s" % _unwrap.describe(nested[0]) if nested else " (no .visual or .model.visual)",
            " and ".join(_family.class_names("features")),
        )
    )


def plan_inputs(model: _Any, config: _config.FrameShardingConfig | None = None) -> tuple:
    """(config, TowerDims) that `enable` plans with, for a model sharded at get_image_features
    (Nemotron Omni, PaddleOCR-VL): `frameshard.plan(grid, cp, cfg, tower=dims,
    temporal_patch_size=1)` with one (1, h, w) grid row per image is the same plan."""
    found = _features_model(model)
    if found is None:
        raise FrameshardError(
            "frameshard.hf.plan_inputs: expected a transformers model of %s, got %s"
            % (" or ".join(_family.class_names("features")), type(model).__name__)
        )
    return _features.plan_inputs(found[0], found[1], config)


def _enable_features(
    model: _torch.nn.Module, family: _family.Family, pg: _Any, mesh: _groups.Mesh | None, config: _Any, **kw: _Any
):
    if mesh is not None:
        raise FrameshardError(
            "frameshard.hf.enable: expected one CP group for a %s model (its images are sharded over "
            "one CP group; mesh_dims [cp]), got a dp x cp mesh" % family.name
        )
    family.features_call.validate(model)
    config, dims = _features.plan_inputs(model, family, config)
    state = _features.State(group=pg, config=config, dims=dims, family=family, **kw)
    method = _types.MethodType(_vision.skipped_by_compile(_features.sharded_image_features), model)
    _patches.install(model, _features.OWNER, state, [(model, "get_image_features", method)])
    return model


def enable(
    model: _torch.nn.Module,
    group: _Any = None,
    config: _config.FrameShardingConfig | None = None,
    *,
    cp_size: int | None = None,
    timeout: _groups.Timeout = None,
    mesh: _groups.Mesh | None = None,
) -> _torch.nn.Module:
    """Makes `model` shard its vision work over `group` (see the module docstring for what a
    group may be). `config=None` is _config.FrameShardingConfig(enabled=True); `cp_size` (None: the
    group's size) must equal the group's size. `mesh` (a frameshard.Mesh, leaving group and
    cp_size unset) is the same as passing it as the group. Calling it again replaces the
    group/config. Returns the patched module: the vision module, or for the families sharded at
    get_image_features the model holding it. Local: nothing is communicated until a forward."""
    _compat.check_transformers("enable")
    config = config if config is not None else _config.FrameShardingConfig(enabled=True)
    if not isinstance(config, _config.FrameShardingConfig):
        raise FrameshardError(
            "frameshard.hf.enable: expected config a frameshard.FrameShardingConfig or None, got %s"
            % _groups.kind(config)
        )
    if mesh is not None and (group is not None or cp_size is not None):
        raise FrameshardError(
            "frameshard.hf.enable: expected group and cp_size unset with a mesh (the Mesh names "
            "its group, dp and cp), got group=%s cp_size=%r" % (_groups.kind(group), cp_size)
        )
    found = _features_model(model)
    visual = find_vision_module(model, fn="enable") if found is None else None
    pg, mesh = _groups.resolve(
        mesh if mesh is not None else group, "hf.enable", mesh_dims=config.mesh_dims, cp_size=cp_size
    )
    if found is not None:
        return _enable_features(*found, pg, mesh, config, cp_size=cp_size, timeout=timeout)
    family = _family.of_vision(visual)
    if config.split_frames:
        _split.check(visual, family)  # names what this release lacks
    state = _vision.State(
        group=None if mesh is not None else pg,
        config=config,
        cp_size=None if mesh is not None else cp_size,
        timeout=timeout,
        family=family,
        dims=_towers.tower_dims(visual),
        mesh=mesh,
    )
    forward = _types.MethodType(_vision.skipped_by_compile(_vision.sharded_forward), visual)
    _patches.install(visual, _vision.OWNER, state, [(visual, "forward", forward)])
    if config.split_frames:
        _patches.add(visual, _vision.OWNER, _split.patches(visual, family))
    return visual


def _patched(model: _Any, fn: str) -> tuple[_Any, str]:
    found = _features_model(model)
    if found is not None:
        return found[0], _features.OWNER
    return find_vision_module(model, fn=fn), _vision.OWNER


def disable(model: _torch.nn.Module) -> bool:
    """Undoes `enable` (every patch it made); False if it was not enabled."""
    return _patches.remove(*_patched(model, "disable"))


def is_enabled(model: _torch.nn.Module) -> bool:
    """Whether `enable` is in force on the model."""
    return _patches.state(*_patched(model, "is_enabled")) is not None


def join_without_media(model: _torch.nn.Module, dtype: _torch.dtype | None = None) -> _torch.Tensor:
    """With a dp x cp mesh: the vision call of a rank whose replica has no media this step, where
    the other ranks call the vision module. Runs the sharded vision module on [0, features] pixel
    values (of `dtype`, default the vision module's) and a [0, 3] grid, so this rank joins the
    collectives and encodes its share of the other replicas' frames; returns a zero scalar that
    depends on the outputs: add it to the loss, so that this rank joins the backward too (a zero
    scalar without graph when the mesh replicated the step: then there is no backward collective)."""
    visual = find_vision_module(model, fn="join_without_media")
    state = _patches.state(visual, _vision.OWNER)
    if state is None or state.mesh is None:
        raise FrameshardError(
            "frameshard.hf.join_without_media: expected a model enabled with a dp x cp mesh "
            "(hf.enable(model, device_mesh, _config.FrameShardingConfig(..., mesh_dims=['dp', 'cp']))), got %s"
            % ("one without a mesh" if state is not None else "one not enabled")
        )
    return _vision.join(visual, dtype)


def _calibration_tower(module: _Any) -> tuple | None:
    """frameshard.calibrate's reader of a transformers vision module (or a model holding one)."""
    try:
        visual = find_vision_module(module, fn="calibrate")
    except FrameshardError:
        return None
    c, family = visual.config, _family.of_vision(visual)
    features = int(c.in_channels) * int(c.temporal_patch_size) * int(c.patch_size) ** 2

    def run(pv: _torch.Tensor, grid: _torch.Tensor, _cu: _torch.Tensor) -> list[_torch.Tensor]:
        out = visual(pv, grid_thw=_family.tower_grid(family, grid))  # GLM-4V: one row per frame
        return [_torch.cat(list(x)) if isinstance(x, (list, tuple)) else x for x in _vision.vision_outputs(out)]

    return features, int(c.spatial_merge_size), run, visual


_calibrate.register_module_tower(_calibration_tower)

__all__ = [
    "SUPPORTED_TRANSFORMERS",
    "ContextParallel",
    "context_parallel",
    "disable",
    "enable",
    "families",
    "find_vision_module",
    "is_enabled",
    "join_without_media",
    "plan_inputs",
    "remove_context_parallel",
]
