"""frameshard: context-parallel vision frame sharding for VLM training.

Instead of every context-parallel (CP) rank running the vision tower on every image and video
frame, frameshard partitions the frames across the CP ranks (an exact optimal contiguous
partition by estimated cost), runs the tower once per rank on its own frames, and gathers the
outputs back with a differentiable variable-size all-gather (backward: reduce-scatter-v sum).

    import frameshard
    cfg = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0)
    p = frameshard.plan([[1, 32, 32], [8, 16, 16]], cp_size=2, config=cfg)
    embeds = frameshard.shard_vision(tower, pixel_values, grid_thw, group, cfg)
    frameshard.hf.enable(model, group, cfg)   # a transformers Qwen-VL model

`torch` is imported first: the extension frameshard._C shares torch's pybind11 types.
"""

import torch  # noqa: F401  (must be loaded before the extension)

from . import _C
from ._C import FrameshardError
from .config import FrameShardingConfig, parse_yaml
from .plan import FrameUnit, Plan, RankPlan, plan
from .shard import all_gather_rows, shard_vision, visual_token_owners

__version__ = "0.1.0"

if _C.torch_version != torch.__version__:
    raise ImportError(
        "frameshard: expected torch %s (the torch the extension was built against), got %s; "
        "reinstall with `python -m pip install --no-build-isolation .`"
        % (_C.torch_version, torch.__version__)
    )

from . import hf  # noqa: E402  (after the version check)

__all__ = [
    "FrameShardingConfig",
    "FrameUnit",
    "FrameshardError",
    "Plan",
    "RankPlan",
    "all_gather_rows",
    "hf",
    "parse_yaml",
    "plan",
    "shard_vision",
    "visual_token_owners",
]
