"""`TowerDims`: the sizes of a vision tower that frameshard's FLOP cost model counts.

`cost_alpha: auto` costs a frame of p patch rows as p * (p + alpha) (plus a window term for
Qwen2.5-VL) with alpha from the tower's width, depth, MLP width and gating, window layout and
mergers (include/frameshard/cost.h has the formula). The C++ core computes the model; this
module reads the dimensions of the tower you actually run, from a transformers vision module or
its config, so the plan balances that tower and not a released preset:

    dims = frameshard.tower_dims(model.model.visual)   # or a vision config
    frameshard.cost_model(dims)       # {"a": 1.0, "b": 2176.0, ..., "label": "..."}
    frameshard.plan(grid, 2, cfg, tower=dims)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from . import _C
from ._unwrap import unwrap_module


@dataclasses.dataclass(frozen=True)
class TowerDims:
    """frameshard::TowerDims (include/frameshard/cost.h); transformers' field names in comments.

    Attributes:
        name: the family's cost preset name ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen3.5"), or
            for a family without a preset its name ("glm4v", "radio"; reports only).
        depth: transformer blocks (depth).
        hidden: tower width (hidden_size; Qwen2-VL: embed_dim).
        intermediate: MLP width (intermediate_size; Qwen2-VL: embed_dim * mlp_ratio).
        gated_mlp: SwiGLU MLP (Qwen2.5-VL) instead of a plain one.
        window_patches: patches per attention window (Qwen2.5-VL: (window_size / patch_size)^2),
            0 when every block attends over the whole frame.
        full_attention_layers: the blocks with full attention when windowed
            (fullatt_block_indexes).
        mergers: patch mergers (1, plus one per DeepStack layer of Qwen3-VL).
        merge_size: spatial_merge_size (merge_size^2 patches per merged token).
        out_hidden: the width the mergers project to (out_hidden_size; Qwen2-VL: hidden_size).
        merger_hidden: the mergers' inner width; 0 for Qwen's hidden * merge_size^2 (Nemotron
            Omni's projector after its pixel shuffle: projector_hidden_size).
        prefix_tokens: tokens every frame carries through every block besides its patches
            (RADIO: num_cls_tokens + num_registers); 0 for the Qwen towers.
    """

    name: str
    depth: int
    hidden: int
    intermediate: int
    gated_mlp: bool = False
    window_patches: int = 0
    full_attention_layers: tuple[int, ...] = ()
    mergers: int = 0
    merge_size: int = 2
    out_hidden: int = 0
    merger_hidden: int = 0
    prefix_tokens: int = 0

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["full_attention_layers"] = list(self.full_attention_layers)
        return d


def config_value(config: Any, name: str, default: Any = None) -> Any:
    """`config.name`, or `default` when it is missing or None (transformers configs leave unset
    fields None)."""
    value = getattr(config, name, default)
    if value is None and default is not None:
        return default
    return value


# Config model_type -> its dims reader, filled by the families of frameshard.hf as they register
# (frameshard.hf._family.register): each family's module is the one home of its readers.
_READERS: dict[str, Callable[[Any], TowerDims]] = {}


def register_reader(model_type: str, reader: Callable[[Any], TowerDims]) -> None:
    """Lets `tower_dims` read configs of `model_type` with `reader`."""
    _READERS[model_type] = reader


def _model_type(config: Any) -> str:
    t = str(getattr(config, "model_type", "") or "")
    return t[: -len("_vision")] if t.endswith("_vision") else t


def tower_dims(tower: Any) -> TowerDims:
    """The cost-model dimensions of a transformers vision module of a supported family, its
    config, or a whole model's config (its `vision_config`); wrappers (FSDP, DDP, torch.compile,
    PEFT) are seen through. FrameshardError for anything else."""
    config = tower
    if hasattr(tower, "parameters") and callable(tower.parameters):
        config = getattr(unwrap_module(tower), "config", None)
    vision = getattr(config, "vision_config", None)
    if vision is not None and _model_type(config) in _READERS:
        config = vision
    reader = _READERS.get(_model_type(config))
    if reader is None:
        got = type(tower).__name__
        if config is not None:
            got += " (model_type %r)" % _model_type(config)
        raise _C.FrameshardError(
            "frameshard.tower_dims: expected a transformers vision module or config of %s, got %s"
            % (", ".join(sorted(_READERS)), got)
        )
    return reader(config)


def cost_model(dims: TowerDims, cost_alpha: str = "auto") -> dict[str, Any]:
    """The C++ cost model (frameshard::parse_cost_alpha) of `dims`: a dict with a, b, c,
    window_coef, window, label and seconds_per_unit; cost(p) = a p^2 + b p + c
    + window_coef * p * min(p, window)."""
    return dict(_C.cost_model(str(cost_alpha), dims.as_dict()))


def resolve_dims(tower: Any) -> TowerDims | None:
    """`tower` as TowerDims when it is one or can be read as one (a transformers vision module or
    config), else None (a plain callable: the config's `tower` preset is costed)."""
    if tower is None or isinstance(tower, TowerDims):
        return tower
    try:
        return tower_dims(tower)
    except _C.FrameshardError:
        return None
