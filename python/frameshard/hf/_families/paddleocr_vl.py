"""PaddleOCR-VL (PaddleOCRVLModel, `.model` of PaddleOCRVLForConditionalGeneration,
`get_image_features(pixel_values, image_grid_thw)`): sharded per image at get_image_features --
the SigLIP-style PaddleOCRVisionModel (per-image attention and position-table interpolation,
per-patch output) and the `projector` (per image: norm, 2 x 2 merge, MLP) -- then one gather of
projected rows. No video path.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..._towers import TowerDims, config_value
from .._family import Family, Features, register


def dims(c: Any) -> TowerDims:
    # The SigLIP-style blocks (plain MLP); the merge and projector are outside the vision module
    # (`projector_dims` counts them as the one merger).
    return TowerDims(
        name="paddleocr_vl",
        depth=int(config_value(c, "num_hidden_layers")),
        hidden=int(config_value(c, "hidden_size")),
        intermediate=int(config_value(c, "intermediate_size")),
    )


def projector_dims(model: Any, vision: TowerDims) -> TowerDims:
    """The projector as the one merger: norm, then linear 4d -> 4d and 4d -> out on the merged
    tokens, exactly the merger cost.h counts (d (d m^2 + o) multiply-adds per patch)."""
    out = int(model.projector.linear_2.out_features)
    return dataclasses.replace(vision, mergers=1, merge_size=2, out_hidden=out)


PADDLEOCR_VL = register(
    Family(
        name="paddleocr_vl",
        module="paddleocr_vl",
        model_types=("paddleocr_vl",),
        dims=dims,
        features=("PaddleOCRVLModel",),
        features_call=Features(
            grid_key="image_grid_thw",
            grid_columns=3,
            parts=lambda m: [m.visual, m.projector],
            dims=projector_dims,
        ),
    )
)
