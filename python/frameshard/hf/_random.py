"""Random transformers vision towers of a given family and size, for calibration and benchmarks.

    visual = frameshard.hf._random.vision_module("qwen3_vl", width=256, depth=4)
    visual = frameshard.hf._random.vision_module_from_config_dir("/path/to/checkpoint")

The weights are random (timing does not depend on them); the module is the transformers class
itself, in float32, with the attention implementation asked for (default "sdpa").
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any

import torch

from .._C import FrameshardError
from . import _family


def families() -> list[str]:
    """The families whose random vision towers can be made (whole-tower vision modules)."""
    return [f.name for f in _family.families() if f.random_models is not None]


def _classes(family: str) -> tuple[Any, Any]:
    if family not in families():
        raise FrameshardError("frameshard.hf: expected a family of %s, got %r" % (", ".join(families()), family))
    described = _family.get(family)
    # The modeling module defines the vision module and imports its config class (the package
    # exports only the public model classes).
    mod = importlib.import_module("transformers.models.%s.modeling_%s" % (described.module, described.module))
    return getattr(mod, described.random_models.vision_config), getattr(mod, described.vision[0])


def vision_config(
    family: str,
    width: int,
    depth: int,
    *,
    heads: int | None = None,
    mlp: int | None = None,
    out_hidden: int | None = None,
    **overrides: Any,
) -> Any:
    """A vision config of `family` with tower width `width`, `depth` blocks, `heads` heads
    (default width // 64, at least 1), MLP width `mlp` (default 4 * width) and merger output
    `out_hidden` (default width), laid out as the family's descriptor says (RandomModels.tower_kwargs:
    Qwen2.5-VL keeps its windows with full attention on the last block, Qwen3-VL puts DeepStack
    mergers after blocks depth//4, depth//2, 3*depth//4, GLM-4V's `mlp` is its merger's)."""
    config_cls, _ = _classes(family)
    kw = _family.get(family).random_models.tower_kwargs(
        width, depth, heads or max(1, width // 64), mlp or 4 * width, out_hidden or width
    )
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
