"""Random transformers vision towers of a given family and size, for calibration and benchmarks.

    visual = frameshard.hf_towers.vision_module("qwen3_vl", width=256, depth=4)
    visual = frameshard.hf_towers.vision_module_from_config_dir("/path/to/checkpoint")

The weights are random (timing does not depend on them); the module is the transformers class
itself, in float32, with the attention implementation asked for (default "sdpa").
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any, Optional

import torch

from ._C import FrameshardError

# family -> (transformers submodule, vision config class, vision module class)
FAMILY_CLASSES = {
    "qwen2_vl": ("qwen2_vl", "Qwen2VLVisionConfig", "Qwen2VisionTransformerPretrainedModel"),
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VLVisionConfig", "Qwen2_5_VisionTransformerPretrainedModel"),
    "qwen3_vl": ("qwen3_vl", "Qwen3VLVisionConfig", "Qwen3VLVisionModel"),
    "qwen3_vl_moe": ("qwen3_vl_moe", "Qwen3VLMoeVisionConfig", "Qwen3VLMoeVisionModel"),
    "qwen3_5": ("qwen3_5", "Qwen3_5VisionConfig", "Qwen3_5VisionModel"),
    "qwen3_5_moe": ("qwen3_5_moe", "Qwen3_5MoeVisionConfig", "Qwen3_5MoeVisionModel"),
    "glm4v": ("glm4v", "Glm4vVisionConfig", "Glm4vVisionModel"),
    "glm4v_moe": ("glm4v_moe", "Glm4vMoeVisionConfig", "Glm4vMoeVisionModel"),
}


def _classes(family: str) -> tuple[Any, Any]:
    if family not in FAMILY_CLASSES:
        raise FrameshardError(
            "frameshard.hf_towers: expected a family of %s, got %r" % (", ".join(FAMILY_CLASSES), family)
        )
    sub, config_name, module_name = FAMILY_CLASSES[family]
    mod = importlib.import_module("transformers.models." + sub)
    return getattr(mod, config_name), getattr(mod, module_name)


def vision_config(
    family: str,
    width: int,
    depth: int,
    *,
    heads: Optional[int] = None,
    mlp: Optional[int] = None,
    out_hidden: Optional[int] = None,
    **overrides: Any,
) -> Any:
    """A vision config of `family` with tower width `width`, `depth` blocks, `heads` heads
    (default width // 64, at least 1), MLP width `mlp` (default 4 * width) and merger output
    `out_hidden` (default width); Qwen2.5-VL keeps its windows with full attention on the last
    block, Qwen3-VL puts DeepStack mergers after blocks depth//4, depth//2, 3*depth//4. GLM-4V's
    blocks use out_hidden_size as their MLP width; `mlp` (intermediate_size) is its merger's."""
    config_cls, _ = _classes(family)
    heads = heads or max(1, width // 64)
    mlp = mlp or 4 * width
    out_hidden = out_hidden or width
    if family == "qwen2_vl":
        kw = dict(embed_dim=width, depth=depth, num_heads=heads, mlp_ratio=mlp / width, hidden_size=out_hidden)
    else:
        kw = dict(hidden_size=width, depth=depth, num_heads=heads, intermediate_size=mlp, out_hidden_size=out_hidden)
    if family == "qwen2_5_vl":
        kw["fullatt_block_indexes"] = [depth - 1]
    if family in ("qwen3_vl", "qwen3_vl_moe"):
        kw["deepstack_visual_indexes"] = sorted({max(0, depth * k // 4) for k in (1, 2, 3)} - {depth})
    kw.update(overrides)
    return config_cls(**kw)


def vision_module(family: str, width: int, depth: int, *, attn: str = "sdpa", seed: int = 0, **sizes: Any) -> Any:
    """A random vision module (vision_config's sizes), float32, in eval mode off (training)."""
    _, module_cls = _classes(family)
    config = vision_config(family, width, depth, **sizes)
    config._attn_implementation = attn
    torch.manual_seed(seed)
    return module_cls._from_config(config, attn_implementation=attn)


def vision_module_from_config_dir(model_dir: str, *, attn: str = "sdpa", seed: int = 0) -> Any:
    """The vision module of a checkpoint directory's config.json (whole model or vision
    config), random weights: what its tower costs does not depend on them."""
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        raw = json.load(f)
    family = str(raw.get("model_type", ""))
    vision = raw.get("vision_config", raw)
    if family.endswith("_vision"):
        family = family[: -len("_vision")]
    config_cls, module_cls = _classes(family)
    fields = {k: v for k, v in vision.items() if k not in ("model_type", "architectures", "transformers_version")}
    config = config_cls(**fields)
    config._attn_implementation = attn
    torch.manual_seed(seed)
    return module_cls._from_config(config, attn_implementation=attn)
