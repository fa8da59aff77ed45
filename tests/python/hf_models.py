"""Tiny random transformers Qwen-VL models and inputs for the Python package tests and example.

The model configurations (sizes, geometry, rope sections) and the unit-scale vision weights come
from make_hf_fixtures.py (the C++ parity fixtures), so both suites test the same towers. Added
here: placeholder token ids inside the tiny vocabulary, so the whole model (not only the vision
tower) can run on a prompt with image tokens, and the MoE vision modules, built alone from the
dense families' vision configs.
"""

import torch
import transformers

from make_hf_fixtures import MERGE, family_specs, make_inputs, redraw_vision_weights

# Inside the tiny vocabulary (128): the defaults (151655...) are not.
TOKENS = dict(vision_start_token_id=2, vision_end_token_id=5, image_token_id=3, video_token_id=4)
TEXT_TOKEN = 10

# family -> (vision config class, vision module class, dense family whose vision kwargs it takes)
VISION_ONLY = {
    "qwen3_vl_moe": ("Qwen3VLMoeVisionConfig", "Qwen3VLMoeVisionModel", "qwen3_vl"),
    "qwen3_5_moe": ("Qwen3_5MoeVisionConfig", "Qwen3_5MoeVisionModel", "qwen3_5"),
}
FAMILIES = tuple(family_specs()) + tuple(VISION_ONLY)


def _module_class(name):
    for family in ("qwen3_vl_moe", "qwen3_5_moe"):
        module = getattr(transformers.models, family)
        if hasattr(module, name):
            return getattr(module, name)
    return getattr(transformers, name)


def prompt_ids(grid_thw, merge=MERGE):
    """One sequence: for each image, a text token, <vision_start>, its image tokens, <vision_end>."""
    ids = []
    for i, (t, h, w) in enumerate(grid_thw.tolist()):
        ids += [TEXT_TOKEN + i, TOKENS["vision_start_token_id"]]
        ids += [TOKENS["image_token_id"]] * (t * h * w // merge**2)
        ids += [TOKENS["vision_end_token_id"]]
    ids.append(TEXT_TOKEN)
    return torch.tensor([ids], dtype=torch.int64)


def build(family, seed=1234):
    """(model, vision module, inputs): a tiny random model of `family` in float32, eager attention,
    unit-scale vision weights; `inputs` holds pixel_values and image_grid_thw (and input_ids for a
    whole model). For the vision-only MoE families `model` is the vision module itself."""
    pixel_values, grid_thw = make_inputs(__import__("numpy").random.default_rng(seed))
    inputs = {"pixel_values": torch.from_numpy(pixel_values), "image_grid_thw": torch.from_numpy(grid_thw)}
    torch.manual_seed(seed)
    if family in VISION_ONLY:
        config_cls, module_cls, dense = VISION_ONLY[family]
        vision_kwargs = family_specs()[dense][2]["vision_config"]
        config = _module_class(config_cls)(**vision_kwargs)
        config._attn_implementation = "eager"
        visual = _module_class(module_cls)._from_config(config, attn_implementation="eager")
        redraw_vision_weights(visual, seed)
        return visual, visual, inputs
    config_cls, model_cls, kwargs = family_specs()[family]
    config = getattr(transformers, config_cls)(**kwargs, **TOKENS)
    model = getattr(transformers, model_cls)._from_config(config, attn_implementation="eager")
    visual = model.model.visual
    redraw_vision_weights(visual, seed)
    inputs["input_ids"] = prompt_ids(inputs["image_grid_thw"])
    # What the processor returns next to input_ids: 1 marks image tokens (M-RoPE needs it).
    inputs["mm_token_type_ids"] = (inputs["input_ids"] == TOKENS["image_token_id"]).to(torch.int64)
    return model, visual, inputs


def is_whole_model(model):
    """Whether `model` is a whole ...ForConditionalGeneration (else a vision module, as `build`
    returns for the vision-only families)."""
    return hasattr(model, "lm_head")


def vision_outputs(model, visual, inputs):
    """The vision features as a list of [tokens, hidden] tensors: get_image_features of a whole
    model (embeddings, then DeepStack features), or the vision module's own forward."""
    if model is visual:
        out = visual(inputs["pixel_values"], grid_thw=inputs["image_grid_thw"])
    else:
        out = model.model.get_image_features(
            pixel_values=inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"]
        )
    return flat_outputs(out)


def flat_outputs(out):
    """A vision output as a list of tensors: itself when a tuple or list, else pooler_output
    (concatenated when split per item) and the DeepStack features."""
    if isinstance(out, (tuple, list)):
        return list(out)
    pooled = out.pooler_output
    if isinstance(pooled, (list, tuple)):
        pooled = torch.cat(list(pooled), dim=0)
    outs = [pooled]
    for d in getattr(out, "deepstack_features", None) or []:
        outs.append(torch.cat(list(d), dim=0) if isinstance(d, (list, tuple)) else d)
    return outs
