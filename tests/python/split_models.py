"""Tiny random transformers vision modules of every family hf.enable splits frames for, built
alone (no language model), float64, eager attention, unit-scale weights: the Qwen families from
make_hf_fixtures.family_specs (the MoE vision modules take their dense family's vision config),
GLM-4V / GLM-4.5V from family_models.GLM_VISION. Inputs are patch rows of 3 x 2 x 4 x 4 features.
"""

import importlib

import torch

from family_models import GLM_VISION
from make_hf_fixtures import family_specs, redraw_vision_weights

FEATURES = 3 * 2 * 4 * 4

# family -> (transformers model module, vision config class, vision module class, config source)
CLASSES = {
    "qwen2_vl": ("qwen2_vl", "Qwen2VLVisionConfig", "Qwen2VisionTransformerPretrainedModel", "qwen2_vl"),
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VLVisionConfig", "Qwen2_5_VisionTransformerPretrainedModel", "qwen2_5_vl"),
    "qwen3_vl": ("qwen3_vl", "Qwen3VLVisionConfig", "Qwen3VLVisionModel", "qwen3_vl"),
    "qwen3_vl_moe": ("qwen3_vl_moe", "Qwen3VLMoeVisionConfig", "Qwen3VLMoeVisionModel", "qwen3_vl"),
    "qwen3_5": ("qwen3_5", "Qwen3_5VisionConfig", "Qwen3_5VisionModel", "qwen3_5"),
    "qwen3_5_moe": ("qwen3_5_moe", "Qwen3_5MoeVisionConfig", "Qwen3_5MoeVisionModel", "qwen3_5"),
    "glm4v": ("glm4v", "Glm4vVisionConfig", "Glm4vVisionModel", None),
    "glm4v_moe": ("glm4v_moe", "Glm4vMoeVisionConfig", "Glm4vMoeVisionModel", None),
}
FAMILIES = tuple(CLASSES)


def vision_config(family):
    sub, config_name, _, source = CLASSES[family]
    config_cls = getattr(importlib.import_module("transformers.models.%s.configuration_%s" % (sub, sub)), config_name)
    kwargs = dict(GLM_VISION) if source is None else dict(family_specs()[source][2]["vision_config"])
    return config_cls(**kwargs)


def build(family, seed=1234, attn="eager", dtype=torch.float64):
    """A random vision module of `family`."""
    sub, _, module_name, _ = CLASSES[family]
    module_cls = getattr(importlib.import_module("transformers.models.%s.modeling_%s" % (sub, sub)), module_name)
    config = vision_config(family)
    config._attn_implementation = attn
    torch.manual_seed(seed)
    visual = module_cls._from_config(config, attn_implementation=attn)
    redraw_vision_weights(visual, seed)
    return visual.to(dtype)


def pixels(grid, seed=5, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    rows = int(torch.as_tensor(grid).prod(-1).sum())
    return torch.randn(rows, FEATURES, generator=gen, dtype=torch.float64).to(dtype)


def outputs(out):
    """The vision module's output as a list: merged embeddings, then DeepStack features."""
    return [out.pooler_output] + list(getattr(out, "deepstack_features", None) or [])
