"""`frameshard.hf.enable` and its companions (the facade, hf/__init__.py, re-exports them).

One walk of the model (`find`) finds what they all need, however a trainer holds it (_unwrap):
the model sharded at get_image_features (Nemotron Omni, PaddleOCR-VL) or the supported whole-tower
vision module, each with its family. `enable` installs the sharded call on that module's instance
(_vision.sharded_forward or _features.sharded_image_features) with the State it shards with;
`disable` and `is_enabled` ask the patch registry (_patches) about the same module.

    found = find(model)
    found.features       # (model, family) sharded at get_image_features, or None
    found.vision         # (vision module, family), or None
    found.patched("fn")  # (the module enable patches, its patch owner); FrameshardError naming fn
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import torch

from .. import _calibrate, _groups, _towers, _unwrap
from .._C import FrameshardError
from .._config import FrameShardingConfig
from . import _compat, _family, _features, _patches, _split, _vision


@dataclasses.dataclass(frozen=True)
class Found:
    """What `find` found in a model (modules unwrapped)."""

    model: Any  # as given (errors describe it)
    features: tuple[torch.nn.Module, _family.Family] | None  # sharded at get_image_features
    vision: tuple[torch.nn.Module, _family.Family] | None  # the whole-tower vision module
    nested: Any  # the first of .visual / .model.visual (errors describe it), or None

    def vision_module(self, fn: str) -> tuple[torch.nn.Module, _family.Family]:
        """(the vision module, its family); FrameshardError naming `fn` when there is none."""
        if self.vision is not None:
            return self.vision
        raise FrameshardError(
            "frameshard.hf.%s: expected a transformers model of a supported family or its vision module "
            "(a subclass of %s; wrappers seen through: %s), got %s%s; pass the model or its vision "
            "module (for another wrapper, the model it wraps; for %s the model)"
            % (
                fn,
                ", ".join(_family.class_names("vision") + _family.class_names("features")),
                _unwrap.wrapper_names(),
                _unwrap.describe(self.model),
                " with vision module %s" % _unwrap.describe(self.nested)
                if self.nested is not None
                else " (no .visual or .model.visual)",
                " and ".join(_family.class_names("features")),
            )
        )

    def patched(self, fn: str) -> tuple[torch.nn.Module, str]:
        """(the module `enable` patches, its owner in the patch registry)."""
        if self.features is not None:
            return self.features[0], _features.OWNER
        return self.vision_module(fn)[0], _vision.OWNER


def find(model: Any) -> Found:
    """One walk of `model` (a ...ForConditionalGeneration, its `.model`, the vision module itself,
    or any of them wrapped): the model sharded at get_image_features among the model and its
    `.model`, and the supported vision module among the model, `.visual` and `.model.visual`."""
    root = _unwrap.unwrap_module(model)
    inner = getattr(root, "model", None)
    nested = [v for v in (getattr(root, "visual", None), getattr(inner, "visual", None)) if v is not None]
    return Found(
        model,
        features=_first([root, inner], _family.of_features),
        vision=_first([root] + [_unwrap.unwrap_module(v) for v in nested], _family.of_vision),
        nested=nested[0] if nested else None,
    )


def _first(modules: list, family_of: Any) -> tuple[torch.nn.Module, _family.Family] | None:
    """(the first of `modules` that `family_of` knows, its family), or None."""
    for module in modules:
        family = family_of(module)
        if family is not None:
            return module, family
    return None


def find_vision_module(model: Any, *, fn: str = "find_vision_module") -> torch.nn.Module:
    """The supported whole-tower vision module of `model` (a ...ForConditionalGeneration, its
    `.model`, the vision module itself, or any of them wrapped), unwrapped; FrameshardError
    (naming `fn`) when there is none."""
    return find(model).vision_module(fn)[0]


def plan_inputs(model: Any, config: FrameShardingConfig | None = None) -> tuple:
    """(config, TowerDims) that `enable` plans with, for a model sharded at get_image_features
    (Nemotron Omni, PaddleOCR-VL): `frameshard.plan(grid, cp, cfg, tower=dims,
    temporal_patch_size=1)` with one (1, h, w) grid row per image is the same plan."""
    found = find(model).features
    if found is None:
        raise FrameshardError(
            "frameshard.hf.plan_inputs: expected a transformers model of %s, got %s"
            % (" or ".join(_family.class_names("features")), type(model).__name__)
        )
    return _features.plan_inputs(*found, config)


def enable(
    model: torch.nn.Module,
    group: Any = None,
    config: FrameShardingConfig | None = None,
    *,
    cp_size: int | None = None,
    timeout: _groups.Timeout = None,
    mesh: _groups.Mesh | None = None,
) -> torch.nn.Module:
    """Makes `model` shard its vision work over `group` (see the package docstring for what a
    group may be). `config=None` is frameshard.FrameShardingConfig(enabled=True); `cp_size` (None:
    the group's size) must equal the group's size. `mesh` (a frameshard.Mesh, leaving group and
    cp_size unset) is the same as passing it as the group. Calling it again replaces the
    group/config. Returns the patched module: the vision module, or for the families sharded at
    get_image_features the model holding it. Local: nothing is communicated until a forward."""
    _compat.check_transformers("enable")
    config = config if config is not None else FrameShardingConfig(enabled=True)
    if not isinstance(config, FrameShardingConfig):
        raise FrameshardError(
            "frameshard.hf.enable: expected config a frameshard.FrameShardingConfig or None, got %s"
            % _groups.kind(config)
        )
    if mesh is not None and (group is not None or cp_size is not None):
        raise FrameshardError(
            "frameshard.hf.enable: expected group and cp_size unset with a mesh (the Mesh names "
            "its group, dp and cp), got group=%s cp_size=%r" % (_groups.kind(group), cp_size)
        )
    found = find(model)
    vision = found.vision_module("enable") if found.features is None else None
    pg, mesh = _groups.resolve(
        mesh if mesh is not None else group, "hf.enable", mesh_dims=config.mesh_dims, cp_size=cp_size
    )
    module, family = found.features if found.features is not None else vision
    state = _vision.State(
        group=pg, config=config, cp_size=cp_size, timeout=timeout, family=family, dims=None, mesh=mesh
    )
    return (_enable_features if found.features is not None else _enable_vision)(module, state)


def _enable_features(model: torch.nn.Module, state: _vision.State) -> torch.nn.Module:
    """Installs _features.sharded_image_features as the model's get_image_features."""
    if state.mesh is not None:
        raise FrameshardError(
            "frameshard.hf.enable: expected one CP group for a %s model (its images are sharded over "
            "one CP group; mesh_dims [cp]), got a dp x cp mesh" % state.family.name
        )
    state.family.features_call.validate(model)
    state.config, state.dims = _features.plan_inputs(model, state.family, state.config)
    method = types.MethodType(_vision.skipped_by_compile(_features.sharded_image_features), model)
    _patches.install(model, _features.OWNER, state, [(model, "get_image_features", method)])
    return model


def _enable_vision(visual: torch.nn.Module, state: _vision.State) -> torch.nn.Module:
    """Installs _vision.sharded_forward as the vision module's forward (and, with split_frames,
    the family's split hooks)."""
    if state.config.split_frames:
        _split.check(visual, state.family)  # names what this release lacks
    if state.mesh is not None:
        state.group, state.cp_size = None, None  # the mesh names them
    state.dims = _towers.tower_dims(visual)
    forward = types.MethodType(_vision.skipped_by_compile(_vision.sharded_forward), visual)
    _patches.install(visual, _vision.OWNER, state, [(visual, "forward", forward)])
    if state.config.split_frames:
        _patches.add(visual, _vision.OWNER, _split.patches(visual, state.family))
    return visual


def disable(model: torch.nn.Module) -> bool:
    """Undoes `enable` (every patch it made); False if it was not enabled."""
    return _patches.remove(*find(model).patched("disable"))


def is_enabled(model: torch.nn.Module) -> bool:
    """Whether `enable` is in force on the model."""
    return _patches.state(*find(model).patched("is_enabled")) is not None


def join_without_media(model: torch.nn.Module, dtype: torch.dtype | None = None) -> torch.Tensor:
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
            "(hf.enable(model, device_mesh, frameshard.FrameShardingConfig(..., mesh_dims=['dp', 'cp']))), "
            "got %s" % ("one without a mesh" if state is not None else "one not enabled")
        )
    return _vision.join(visual, dtype)


def _calibration_tower(module: Any) -> tuple | None:
    """frameshard.calibrate's reader of a transformers vision module (or a model holding one)."""
    vision = find(module).vision
    if vision is None:
        return None
    visual, family = vision
    c = visual.config
    features = int(c.in_channels) * int(c.temporal_patch_size) * int(c.patch_size) ** 2

    def run(pv: torch.Tensor, grid: torch.Tensor, _cu: torch.Tensor) -> list[torch.Tensor]:
        out = visual(pv, grid_thw=_family.tower_grid(family, grid))  # GLM-4V: one row per frame
        return [torch.cat(list(x)) if isinstance(x, (list, tuple)) else x for x in _vision.vision_outputs(out)]

    return features, int(c.spatial_merge_size), run, visual


_calibrate.register_module_tower(_calibration_tower)
