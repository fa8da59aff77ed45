"""Qwen3.5 and Qwen3.5-MoE: Qwen3-VL's vision module without DeepStack; the language model
mixes full attention with gated delta-net linear attention (a recurrence over the sequence)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..._towers import TowerDims
from .._family import Family, RandomModels, register, tiny_vision_sizes
from . import qwen3_vl


def dims(c: Any) -> TowerDims:
    return qwen3_vl.dims(c, "qwen3.5")


def tiny_model(vision: dict, text: dict, recipe: dict) -> None:
    tiny_vision_sizes(vision, text)
    vision.update(num_position_embeddings=64)
    layers, hidden = text["num_hidden_layers"], text["hidden_size"]
    text.update(
        # linear, full, linear, full, ...: the last layer full attention
        layer_types=["linear_attention" if i % 2 == 0 and i + 1 < layers else "full_attention" for i in range(layers)],
        linear_num_key_heads=2,
        linear_num_value_heads=2,
        linear_key_head_dim=hidden // 4,
        linear_value_head_dim=hidden // 4,
    )
    text["rope_parameters"]["partial_rotary_factor"] = 1.0


QWEN3_5 = register(
    Family(
        name="qwen3_5",
        module="qwen3_5",
        model_types=("qwen3_5",),
        dims=dims,
        vision=("Qwen3_5VisionModel",),
        text=("Qwen3_5TextModel",),
        linear_attention=("Qwen3_5GatedDeltaNet",),
        split=qwen3_vl.SPLIT,
        random_models=RandomModels(
            "Qwen3_5VisionConfig",
            model_classes=("Qwen3_5Config", "Qwen3_5ForConditionalGeneration"),
            tiny_model=tiny_model,
        ),
    )
)

QWEN3_5_MOE = register(
    dataclasses.replace(
        QWEN3_5,
        name="qwen3_5_moe",
        module="qwen3_5_moe",
        model_types=("qwen3_5_moe",),
        vision=("Qwen3_5MoeVisionModel",),
        text=("Qwen3_5MoeTextModel",),
        linear_attention=("Qwen3_5MoeGatedDeltaNet",),
        random_models=RandomModels("Qwen3_5MoeVisionConfig"),
    )
)
