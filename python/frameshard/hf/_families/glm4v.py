"""GLM-4.1V / GLM-4.5V (Glm4vVisionModel, Glm4vMoeVisionModel): per-frame attention, a learned
position table, the downsample and merger inside the vision module.

Its position embedding (Glm4vVisionEmbeddings) looks each frame's (h, w) up by frame index in
grid_thw, so the module takes one (1, h, w) grid row per frame (its get_video_features passes
them so); frameshard's local grid, whose floor frames are one (count, h, w) row, is expanded.
Split frames: the learned table reads the whole frame's (h, w) from its grid row and the piece's
(h, w) coordinates from `position_ids`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..._towers import TowerDims, config_value
from .._family import Family, RandomModels, Split, register


def dims(c: Any) -> TowerDims:
    # The blocks' SwiGLU MLP is out_hidden_size wide (Glm4VisionMlp), and the merge (a merge x
    # merge conv to out_hidden_size, then a SwiGLU merger of intermediate_size) is counted as one
    # Qwen-style merger to out_hidden. That counts about a third of GLM's merge; the rest is 5 %
    # of the tower's linear work at GLM-4.1V's sizes (width 1536, out 4096, intermediate 13696,
    # depth 24), so alpha is about 5 % low (the p^2 term is exact).
    out = int(config_value(c, "out_hidden_size"))
    return TowerDims(
        name="glm4v",
        depth=int(config_value(c, "depth")),
        hidden=int(config_value(c, "hidden_size")),
        intermediate=out,
        gated_mlp=True,
        mergers=1,
        merge_size=int(config_value(c, "spatial_merge_size", 2)),
        out_hidden=out,
    )


GLM4V = register(
    Family(
        name="glm4v",
        module="glm4v",
        model_types=("glm4v",),
        dims=dims,
        vision=("Glm4vVisionModel",),
        text=("Glm4vTextModel",),
        one_row_per_frame=True,
        split=Split(),
        random_models=RandomModels("Glm4vVisionConfig"),
    )
)

GLM4V_MOE = register(
    dataclasses.replace(
        GLM4V,
        name="glm4v_moe",
        module="glm4v_moe",
        model_types=("glm4v_moe",),
        vision=("Glm4vMoeVisionModel",),
        text=("Glm4vMoeTextModel",),
        random_models=RandomModels("Glm4vMoeVisionConfig"),
    )
)
