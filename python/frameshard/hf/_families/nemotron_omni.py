"""Nemotron Omni (NemotronH_Omni_Reasoning_V3, `get_image_features(pixel_values, image_grid_hw)`):
sharded per image at get_image_features -- the RADIO vision model (packed patches, cls and
register prefix tokens per image, attention within each image), the optional final LayerNorm, a
2 x 2 pixel shuffle of each image's (h, w) feature grid and the multi_modal_projector -- then
one gather of post-projector rows ("project, then gather", as Megatron Bridge orders it).

Videos are not split: get_video_features runs RADIO densely on equal-size tubelets and the
forward's Efficient Video Sampling compares each tubelet with the previous one after the
projector; the video call is left as transformers runs it. Grids with an odd side are refused:
transformers' pixel shuffle needs even sides (its image processor makes every grid even).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..._C import FrameshardError
from ..._towers import TowerDims, config_value
from .._family import Family, Features, register


def dims(c: Any) -> TowerDims:
    # RADIO's blocks with their cls / register prefix tokens; the pixel shuffle and projector
    # (outside the vision config) are added as the merger by `projector_dims`.
    hidden = int(config_value(c, "hidden_size"))
    mlp = int(hidden * float(config_value(c, "mlp_ratio", 4.0)))
    swiglu = bool(config_value(c, "use_swiglu_ffn", False))
    if swiglu:  # as RadioSwiGLUFFN: two thirds, rounded up to a multiple of 8
        mlp = (int(mlp * 2 / 3) + 7) // 8 * 8
    return TowerDims(
        name="radio",
        depth=int(config_value(c, "num_hidden_layers")),
        hidden=hidden,
        intermediate=mlp,
        gated_mlp=swiglu,
        prefix_tokens=int(config_value(c, "num_cls_tokens", 0)) + int(config_value(c, "num_registers", 0)),
    )


def projector_dims(model: Any, vision: TowerDims) -> TowerDims:
    """RADIO's blocks on p + P tokens, the projector after the 2 x 2 pixel shuffle as the one
    merger (4d -> projector_hidden_size -> out on the p / 4 shuffled tokens; its RMSNorm not
    counted), as the C++ radio tower costs it."""
    proj = model.multi_modal_projector
    return dataclasses.replace(
        vision,
        mergers=1,
        merge_size=2,
        merger_hidden=int(proj.linear_1.out_features),
        out_hidden=int(proj.linear_2.out_features),
    )


def check_even(grid: torch.Tensor) -> None:
    odd = [i for i, (_, h, w) in enumerate(grid.tolist()) if h % 2 or w % 2]
    if odd:
        raise FrameshardError(
            "frameshard.hf: expected even image_grid_hw sides (Nemotron Omni's 2 x 2 pixel shuffle; "
            "transformers' image processor makes every grid even and its model does not pad), got "
            "%s at image %d" % (grid[odd[0], 1:].tolist(), odd[0])
        )


def check_ratio(model: Any) -> None:
    ratio = float(model.config.downsample_ratio)
    if ratio != 0.5:
        raise FrameshardError(
            "frameshard.hf.enable: expected a Nemotron Omni config with downsample_ratio 0.5 (a 2 x 2 "
            "pixel shuffle, as transformers' get_image_features assumes), got %r" % ratio
        )


NEMOTRON_OMNI = register(
    Family(
        name="nemotron_h_omni",
        module="nemotron_h_omni",
        # a whole Nemotron Omni config: its vision_config is RADIO's
        model_types=("radio", "nemotron_h_omni"),
        dims=dims,
        features=("NemotronH_Omni_Reasoning_V3",),
        features_call=Features(
            grid_key="image_grid_hw",
            grid_columns=2,
            parts=lambda m: [m.vision_model, m.vision_final_layernorm, m.multi_modal_projector],
            dims=projector_dims,
            check=check_even,
            validate=check_ratio,
        ),
    )
)
