"""`Family`: everything frameshard knows about one transformers model family, and the registry.

Each supported family is one module of `frameshard.hf._families` that builds its `Family` and
calls `register`; nothing else in the package names a family. A module is matched to a family
along its class hierarchy (MRO), so a subclass and FSDP2's generated `FSDP<Class>` count, and
only classes defined by transformers match (a user class of the same name does not).

    from frameshard.hf._family import Family, register
    register(Family(name="qwen2_vl", module="qwen2_vl", vision=("Qwen2VisionTransformerPretrainedModel",),
                    dims=read_dims, ...))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from .. import _towers

# A vision module -> the precomputed-geometry kwargs of its split-frame pieces beyond
# position_ids and cu_seqlens: hook(visual, grid, pieces, local_rows) -> dict.
GeometryHook = Callable[[Any, torch.Tensor, Any, torch.Tensor], dict]


@dataclasses.dataclass(frozen=True)
class Split:
    """How split frames (`split_frames: true`) patch a family's whole-tower vision module.

    Attributes:
        helpers: the `transformers.vision_utils` functions through which the vision forward takes
            the precomputed geometry (each has a `kwargs` parameter and the family's modeling
            module calls it: checked at enable).
        kwargs: the precomputed-geometry keyword parameters the vision forward must accept.
        full_attention_blocks: visual -> indices of the blocks whose attention spans the frame.
        geometry: the family's extra piece geometry (windows, interpolated position tables).
    """

    helpers: tuple[str, ...] = ("get_vision_position_ids", "get_vision_attention_seqlens")
    kwargs: tuple[str, ...] = ("position_ids", "cu_seqlens")
    full_attention_blocks: Callable[[Any], list[int]] = lambda visual: list(range(len(visual.blocks)))
    geometry: GeometryHook | None = None


@dataclasses.dataclass(frozen=True)
class Features:
    """A family sharded at the model's `get_image_features` (encoder to projector, per image;
    project, then gather) instead of at its vision module.

    Attributes:
        grid_key: the grid argument of get_image_features.
        grid_columns: 2 for (h, w) rows, 3 for (t, h, w) rows.
        parts: model -> the modules get_image_features runs (their parameters: trainable or not).
        dims: (model, the vision config's TowerDims) -> the dims the plan costs (the projector
            as the one merger).
        check: grid [n, 3] -> None, raising FrameshardError for grids the family cannot take.
        validate: model -> None, raising FrameshardError for configs the sharded call cannot honour.
    """

    grid_key: str
    grid_columns: int
    parts: Callable[[Any], list]
    dims: Callable[[Any, _towers.TowerDims], _towers.TowerDims]
    check: Callable[[torch.Tensor], None] = lambda grid: None
    validate: Callable[[Any], None] = lambda model: None


@dataclasses.dataclass(frozen=True)
class RandomModels:
    """How the command line builds a model of the family, which sharding itself never needs.

    Why the package holds it (and not the tests): no weights can be downloaded where frameshard is
    tried first, so `python -m frameshard ab` times random vision towers (frameshard.hf._random)
    and `python -m frameshard train` trains a tiny random model on its embedded default; with
    `model.model_dir` it loads a checkpoint by `model_classes`.

    Attributes:
        vision_config: the vision config class (random towers: frameshard.hf._random).
        tower_kwargs: (width, depth, heads, mlp, out_hidden) -> that config's keyword arguments.
        model_classes: (config class, ...ForConditionalGeneration class) in transformers, for
            `python -m frameshard train` (tiny random models and checkpoints); empty: not offered.
        tiny_model: (vision kwargs, text kwargs, recipe) -> None: the family's changes to the
            tiny model's configs (python -m frameshard train).
    """

    vision_config: str
    tower_kwargs: Callable[..., dict] = lambda *sizes: tower_kwargs(*sizes)
    model_classes: tuple[str, ...] = ()
    tiny_model: Callable[[dict, dict, dict], None] | None = None


@dataclasses.dataclass(frozen=True)
class Family:
    """One transformers model family (see the module docstring).

    Attributes:
        name: the family's name ("qwen2_vl"); also `model.family` of `python -m frameshard train`.
        module: its transformers submodule (transformers.models.<module>).
        model_types: the config model_type values `dims` reads (a whole model's config or its
            vision config: the "_vision" suffix is dropped).
        dims: a vision config -> the TowerDims of frameshard's FLOP cost model.
        vision: vision module classes sharded as a whole tower (their forward is replaced).
        features: model classes sharded at get_image_features (see Features), with `features_call`.
        text: language model classes that `hf.context_parallel` divides.
        linear_attention: classes of the language model's linear-attention layers (a recurrence
            over the sequence: context_parallel runs them on the gathered sequence).
        one_row_per_frame: the vision module takes one (1, h, w) grid row per frame (GLM-4V).
        split: split-frame hooks; None: the family never cuts frames.
        random_models: how the command line builds models of the family (see RandomModels);
            None: `python -m frameshard ab|train` and frameshard.hf._random do not offer it.
    """

    name: str
    module: str
    model_types: tuple[str, ...]
    dims: Callable[[Any], _towers.TowerDims]
    vision: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    features_call: Features | None = None
    text: tuple[str, ...] = ()
    linear_attention: tuple[str, ...] = ()
    one_row_per_frame: bool = False
    split: Split | None = None
    random_models: RandomModels | None = None


def tower_kwargs(width: int, depth: int, heads: int, mlp: int, out: int, **extra: Any) -> dict:
    """A random tower's vision config keywords, as most families name them (RandomModels.tower_kwargs)."""
    return dict(hidden_size=width, depth=depth, num_heads=heads, intermediate_size=mlp, out_hidden_size=out, **extra)


_FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Adds `family` to the registry (its config readers to frameshard.tower_dims); returns it."""
    if family.name in _FAMILIES:
        raise ValueError("frameshard.hf: family %r registered twice" % family.name)
    _FAMILIES[family.name] = family
    for model_type in family.model_types:
        _towers.register_reader(model_type, family.dims)
    return family


def families() -> list[Family]:
    """Every registered family, in registration order."""
    return list(_FAMILIES.values())


def get(name: str) -> Family:
    """The family named `name` (KeyError otherwise)."""
    return _FAMILIES[name]


def _transformers_classes(module: Any) -> list[str]:
    return [c.__name__ for c in type(module).__mro__ if c.__module__.startswith("transformers.")]


def _match(module: Any, field: str) -> Family | None:
    if module is None:
        return None
    names = _transformers_classes(module)
    for name in names:  # the most derived transformers class decides
        for family in _FAMILIES.values():
            if name in getattr(family, field):
                return family
    return None


def of_vision(module: Any) -> Family | None:
    """The family whose whole-tower vision module `module` is, or None."""
    return _match(module, "vision")


def of_features(module: Any) -> Family | None:
    """The family whose get_image_features model `module` is, or None."""
    return _match(module, "features")


def of_text(module: Any) -> Family | None:
    """The family whose language model `module` is, or None."""
    return _match(module, "text")


def class_names(field: str) -> list[str]:
    """Every class name of `field` ("vision", "features", "text") over the registry (errors)."""
    return [name for family in _FAMILIES.values() for name in getattr(family, field)]


def tower_grid(family: Family | None, grid: torch.Tensor) -> torch.Tensor:
    """`grid` ([n, 3] t, h, w) as the vision module of `family` takes it: unchanged, or with
    `one_row_per_frame` one (1, h, w) row per frame (the same frames, the same encoding)."""
    if family is None or not family.one_row_per_frame or not bool((grid[:, 0] > 1).any()):
        return grid
    hw = grid[:, 1:].repeat_interleave(grid[:, 0], dim=0)
    return torch.cat([torch.ones_like(hw[:, :1]), hw], dim=1)


def tiny_vision_sizes(vision: dict, text: dict) -> None:
    """The Qwen2.5-VL / Qwen3-VL / Qwen3.5 vision sizes of `python -m frameshard train`'s tiny
    model: the recipe's width ("width"), an MLP twice as wide, merged into the text width."""
    width = vision.pop("width")
    vision.update(hidden_size=width, intermediate_size=2 * width, out_hidden_size=text["hidden_size"])
