"""Qwen2-VL: a whole-tower vision module (every block full attention), a plain MLP, one merger."""

from __future__ import annotations

from typing import Any

from ..._towers import TowerDims, config_value
from .._family import Family, RandomModels, Split, register


def dims(c: Any) -> TowerDims:
    embed = int(config_value(c, "embed_dim"))
    return TowerDims(
        name="qwen2-vl",
        depth=int(config_value(c, "depth")),
        hidden=embed,
        intermediate=int(embed * float(config_value(c, "mlp_ratio", 4))),
        mergers=1,
        merge_size=int(config_value(c, "spatial_merge_size", 2)),
        out_hidden=int(config_value(c, "hidden_size")),
    )


def random_tower(width: int, depth: int, heads: int, mlp: int, out: int) -> dict:
    ratio = mlp / width  # transformers 5.24 types mlp_ratio int: keep an integral ratio one
    return dict(
        embed_dim=width,
        depth=depth,
        num_heads=heads,
        mlp_ratio=int(ratio) if ratio.is_integer() else ratio,
        hidden_size=out,
    )


def tiny_model(vision: dict, text: dict, recipe: dict) -> None:
    width = vision.pop("width")
    vision.update(embed_dim=width, hidden_size=text["hidden_size"], mlp_ratio=2)


QWEN2_VL = register(
    Family(
        name="qwen2_vl",
        module="qwen2_vl",
        model_types=("qwen2_vl",),
        dims=dims,
        vision=("Qwen2VisionTransformerPretrainedModel",),
        text=("Qwen2VLTextModel",),
        split=Split(),
        random_models=RandomModels(
            "Qwen2VLVisionConfig", random_tower, ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration"), tiny_model
        ),
    )
)
