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
from typing import Any, Optional

from . import _C


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


def _get(config: Any, name: str, default: Any = None) -> Any:
    value = getattr(config, name, default)
    if value is None and default is not None:
        return default
    return value


def _qwen2_vl(c: Any) -> TowerDims:
    embed = int(_get(c, "embed_dim"))
    return TowerDims(
        name="qwen2-vl",
        depth=int(_get(c, "depth")),
        hidden=embed,
        intermediate=int(embed * float(_get(c, "mlp_ratio", 4))),
        mergers=1,
        merge_size=int(_get(c, "spatial_merge_size", 2)),
        out_hidden=int(_get(c, "hidden_size")),
    )


def _qwen2_5_vl(c: Any) -> TowerDims:
    merge = int(_get(c, "spatial_merge_size", 2))
    depth = int(_get(c, "depth"))
    # As transformers: merged tokens per window side, times the merge size.
    side = int(_get(c, "window_size", 112)) // merge // int(_get(c, "patch_size", 14)) * merge
    full = sorted({int(i) for i in _get(c, "fullatt_block_indexes", []) if 0 <= int(i) < depth})
    return TowerDims(
        name="qwen2.5-vl",
        depth=depth,
        hidden=int(_get(c, "hidden_size")),
        intermediate=int(_get(c, "intermediate_size")),
        gated_mlp=True,
        window_patches=side * side,
        full_attention_layers=tuple(full),
        mergers=1,
        merge_size=merge,
        out_hidden=int(_get(c, "out_hidden_size")),
    )


def _qwen3_vl(c: Any, name: str = "qwen3-vl") -> TowerDims:
    deepstack = list(_get(c, "deepstack_visual_indexes", []) or [])
    return TowerDims(
        name=name,
        depth=int(_get(c, "depth")),
        hidden=int(_get(c, "hidden_size")),
        intermediate=int(_get(c, "intermediate_size")),
        mergers=1 + len(deepstack),
        merge_size=int(_get(c, "spatial_merge_size", 2)),
        out_hidden=int(_get(c, "out_hidden_size")),
    )


def _glm4v(c: Any) -> TowerDims:
    # GLM-4.1V / 4.5V: the blocks' SwiGLU MLP is out_hidden_size wide (Glm4VisionMlp), and the
    # merge (a merge x merge conv to out_hidden_size, then a SwiGLU merger of intermediate_size)
    # is counted as one Qwen-style merger to out_hidden. That counts about a third of GLM's merge;
    # the rest is 5 % of the tower's linear work at GLM-4.1V's sizes (width 1536, out 4096,
    # intermediate 13696, depth 24), so alpha is about 5 % low (the p^2 term is exact).
    out = int(_get(c, "out_hidden_size"))
    return TowerDims(
        name="glm4v",
        depth=int(_get(c, "depth")),
        hidden=int(_get(c, "hidden_size")),
        intermediate=out,
        gated_mlp=True,
        mergers=1,
        merge_size=int(_get(c, "spatial_merge_size", 2)),
        out_hidden=out,
    )


def _radio(c: Any) -> TowerDims:
    # RADIO's blocks with their cls / register prefix tokens; Nemotron Omni's pixel shuffle and
    # projector (outside the vision config) are added as the merger by frameshard.hf_families.
    hidden = int(_get(c, "hidden_size"))
    mlp = int(hidden * float(_get(c, "mlp_ratio", 4.0)))
    swiglu = bool(_get(c, "use_swiglu_ffn", False))
    if swiglu:  # as RadioSwiGLUFFN: two thirds, rounded up to a multiple of 8
        mlp = (int(mlp * 2 / 3) + 7) // 8 * 8
    return TowerDims(
        name="radio",
        depth=int(_get(c, "num_hidden_layers")),
        hidden=hidden,
        intermediate=mlp,
        gated_mlp=swiglu,
        prefix_tokens=int(_get(c, "num_cls_tokens", 0)) + int(_get(c, "num_registers", 0)),
    )


def _paddleocr(c: Any) -> TowerDims:
    # PaddleOCR-VL's SigLIP-style blocks (plain MLP); its merge and projector are outside the
    # vision module (frameshard.hf_families counts them as the one merger).
    return TowerDims(
        name="paddleocr_vl",
        depth=int(_get(c, "num_hidden_layers")),
        hidden=int(_get(c, "hidden_size")),
        intermediate=int(_get(c, "intermediate_size")),
    )


# Vision config model_type -> dims reader. A whole model's config holds the vision config under
# vision_config.
_READERS = {
    "qwen2_vl": _qwen2_vl,
    "qwen2_5_vl": _qwen2_5_vl,
    "qwen3_vl": _qwen3_vl,
    "qwen3_vl_moe": _qwen3_vl,
    "qwen3_5": lambda c: _qwen3_vl(c, "qwen3.5"),
    "qwen3_5_moe": lambda c: _qwen3_vl(c, "qwen3.5"),
    "glm4v": _glm4v,
    "glm4v_moe": _glm4v,
    "radio": _radio,
    "nemotron_h_omni": _radio,  # a whole Nemotron Omni config: its vision_config is RADIO's
    "paddleocr_vl": _paddleocr,
}


def _model_type(config: Any) -> str:
    t = str(getattr(config, "model_type", "") or "")
    return t[: -len("_vision")] if t.endswith("_vision") else t


def tower_dims(tower: Any) -> TowerDims:
    """The cost-model dimensions of a transformers Qwen-VL, GLM-4V, RADIO or PaddleOCR-VL vision
    module, its config, or a whole model's config (its `vision_config`); wrappers
    (FSDP, DDP, torch.compile, PEFT) are seen through. FrameshardError for anything else."""
    from .hf import unwrap_module  # noqa: PLC0415  (hf imports this module)

    config = tower
    if hasattr(tower, "parameters") and callable(getattr(tower, "parameters")):
        config = getattr(unwrap_module(tower), "config", None)
    vision = getattr(config, "vision_config", None)
    if vision is not None and _model_type(config) in _READERS:
        config = vision
    reader = _READERS.get(_model_type(config))
    if reader is None:
        raise _C.FrameshardError(
            "frameshard.tower_dims: expected a transformers vision module or config of %s, got %s"
            % (", ".join(sorted(_READERS)), type(tower).__name__ + (
                " (model_type %r)" % _model_type(config) if config is not None else ""))
        )
    return reader(config)


def cost_model(dims: TowerDims, cost_alpha: str = "auto") -> dict[str, Any]:
    """The C++ cost model (frameshard::parse_cost_alpha) of `dims`: a dict with a, b, c,
    window_coef, window, label and seconds_per_unit; cost(p) = a p^2 + b p + c
    + window_coef * p * min(p, window)."""
    return dict(_C.cost_model(str(cost_alpha), dims.as_dict()))


def resolve_dims(tower: Any) -> Optional[TowerDims]:
    """`tower` as TowerDims when it is one or can be read as one (a transformers vision module or
    config), else None (a plain callable: the config's `tower` preset is costed)."""
    if tower is None or isinstance(tower, TowerDims):
        return tower
    try:
        return tower_dims(tower)
    except _C.FrameshardError:
        return None
