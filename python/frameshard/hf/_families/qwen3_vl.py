"""Qwen3-VL and Qwen3-VL-MoE (the same vision module): full attention in every block, a learned
position table interpolated per frame, DeepStack mergers after some blocks.

Split frames: a piece takes the interpolated position table of its whole frame at its rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from ..._towers import TowerDims, config_value
from .._family import Family, RandomModels, Split, register, tiny_vision_sizes, tower_kwargs


def dims(c: Any, name: str = "qwen3-vl") -> TowerDims:
    deepstack = list(config_value(c, "deepstack_visual_indexes", []) or [])
    return TowerDims(
        name=name,
        depth=int(config_value(c, "depth")),
        hidden=int(config_value(c, "hidden_size")),
        intermediate=int(config_value(c, "intermediate_size")),
        mergers=1 + len(deepstack),
        merge_size=int(config_value(c, "spatial_merge_size", 2)),
        out_hidden=int(config_value(c, "out_hidden_size")),
    )


def interpolation(visual: torch.nn.Module, grid: torch.Tensor, pieces: Sequence[Any], local: torch.Tensor) -> dict:
    """The whole frames' interpolated position-table indices and weights at the local rows."""
    from transformers import vision_utils  # noqa: PLC0415  (transformers is optional)

    indices, weights = vision_utils.get_vision_interpolation_indices_and_weights(
        grid,
        num_grid_per_side=visual.num_grid_per_side,
        mode=visual.interpolation_mode,
        align_corners=visual.interpolation_align_corners,
        spatial_merge_size=visual.config.spatial_merge_size,
    )
    return {
        "interp_indices": indices.index_select(0, local.to(indices.device)),
        "interp_weights": weights.index_select(0, local.to(weights.device)),
    }


SPLIT = Split(
    helpers=(
        "get_vision_position_ids",
        "get_vision_attention_seqlens",
        "get_vision_interpolation_indices_and_weights",
    ),
    kwargs=("position_ids", "cu_seqlens", "interp_indices", "interp_weights"),
    geometry=interpolation,
)


def random_tower(width: int, depth: int, heads: int, mlp: int, out: int) -> dict:
    deepstack = sorted({max(0, depth * k // 4) for k in (1, 2, 3)} - {depth})
    return tower_kwargs(width, depth, heads, mlp, out, deepstack_visual_indexes=deepstack)


def tiny_model(vision: dict, text: dict, recipe: dict) -> None:
    tiny_vision_sizes(vision, text)
    vision.update(num_position_embeddings=64, deepstack_visual_indexes=[0])


QWEN3_VL = register(
    Family(
        name="qwen3_vl",
        module="qwen3_vl",
        model_types=("qwen3_vl",),
        dims=dims,
        vision=("Qwen3VLVisionModel",),
        text=("Qwen3VLTextModel",),
        split=SPLIT,
        random_models=RandomModels(
            "Qwen3VLVisionConfig", random_tower, ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration"), tiny_model
        ),
    )
)

QWEN3_VL_MOE = register(
    dataclasses.replace(
        QWEN3_VL,
        name="qwen3_vl_moe",
        module="qwen3_vl_moe",
        model_types=("qwen3_vl_moe",),
        vision=("Qwen3VLMoeVisionModel",),
        text=("Qwen3VLMoeTextModel",),
        random_models=RandomModels("Qwen3VLMoeVisionConfig", random_tower),
    )
)
