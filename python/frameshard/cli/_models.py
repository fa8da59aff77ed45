"""The models `python -m frameshard train|ab` trains: a tiny random one of a family, or a
checkpoint's; and the frame-sharding config a recipe names. Shared by the command (_ab) and its
rank processes (_train)."""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from .._C import FrameshardError
from .._config import FrameShardingConfig
from ..hf import _family

# The families `train` builds models of: those whose descriptor names model classes.
FAMILIES = tuple(
    f.name
    for f in _family.families()
    if f.random_models is not None and f.random_models.model_classes and f.random_models.tiny_model is not None
)
FS = "distributed.multimodal.vision.frame_sharding"
TOKENS = dict(vision_start_token_id=2, vision_end_token_id=5, image_token_id=3, video_token_id=4)
PATCH, TEMPORAL, MERGE = 14, 2, 2


def frame_sharding(recipe: dict, enabled: bool) -> Any:
    fields = {k[len(FS) + 1 :]: v for k, v in recipe.items() if k.startswith(FS + ".")}
    fields["enabled"] = enabled
    return FrameShardingConfig(**fields)


def tiny_model(recipe: dict) -> torch.nn.Module:
    """A random ...ForConditionalGeneration of the recipe's family and sizes (seeded by
    train.seed, so every rank builds the same weights)."""
    import transformers  # noqa: PLC0415

    family = recipe["model.family"]
    hidden, heads = int(recipe["model.text_hidden"]), int(recipe["model.text_heads"])
    half = hidden // heads // 2  # the mrope sections (t, h, w) sum to head_dim / 2
    text = dict(
        vocab_size=int(recipe["model.vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(recipe["model.text_ffn"]),
        num_hidden_layers=int(recipe["model.text_layers"]),
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=hidden // heads,
        bos_token_id=0,
        eos_token_id=1,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [half - 2 * (half // 4), half // 4, half // 4],
        },
    )
    vision = dict(
        depth=int(recipe["model.vision_depth"]),
        num_heads=int(recipe["model.vision_heads"]),
        in_channels=3,
        patch_size=PATCH,
        temporal_patch_size=TEMPORAL,
        spatial_merge_size=MERGE,
    )
    vision["width"] = int(recipe["model.vision_hidden"])
    described = _family.get(family).random_models
    described.tiny_model(vision, text, recipe)  # the family's own sizes and layer layout
    names = described.model_classes
    config = getattr(transformers, names[0])(text_config=text, vision_config=vision, **TOKENS)
    torch.manual_seed(int(recipe["train.seed"]))
    return getattr(transformers, names[1])._from_config(config, attn_implementation="sdpa")


def checkpoint_family(model_dir: str) -> str:
    """The family (model_type of config.json) of a Hugging Face checkpoint directory."""
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        raise FrameshardError(
            "frameshard train: model.model_dir: expected a checkpoint with config.json, got %r" % model_dir
        )
    with open(path, encoding="utf-8") as f:
        family = str(json.load(f).get("model_type", ""))
    if family not in FAMILIES:
        raise FrameshardError(
            "frameshard train: model.model_dir: expected a checkpoint of model_type %s, got %r in %s"
            % (", ".join(FAMILIES), family, path)
        )
    return family


def checkpoint_model(model_dir: str) -> torch.nn.Module:
    """The ...ForConditionalGeneration of a checkpoint directory (model.model_dir) with its
    weights, float32, SDPA attention."""
    import transformers  # noqa: PLC0415

    cls = getattr(transformers, _family.get(checkpoint_family(model_dir)).random_models.model_classes[1])
    return cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
