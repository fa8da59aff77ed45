"""The batches of `python -m frameshard train|ab` (cli/_ab.py): the C++ core's seeded presets as one
prompt of a transformers Qwen-VL model, and GRPO groups of one prompt's samples."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .._C import FrameshardError
from .._plan import workload


@dataclasses.dataclass(frozen=True)
class Geometry:
    """What a batch takes from the model's config: its placeholder token ids, the range of ids
    the random text draws from (below every special id), and the patch layout of pixel_values."""

    image_token_id: int
    vision_start_token_id: int
    vision_end_token_id: int
    text_ids: tuple[int, int]
    patch: int
    temporal: int
    merge: int
    channels: int

    @staticmethod
    def of(config: Any) -> Geometry:
        ids = {k: int(getattr(config, k)) for k in ("image_token_id", "vision_start_token_id", "vision_end_token_id")}
        special = [v for v in list(ids.values()) + [int(getattr(config, "video_token_id", 0) or 0)] if v >= 10]
        vision = config.vision_config
        return Geometry(
            **ids,
            text_ids=(10, min([int(config.text_config.vocab_size)] + special)),
            patch=int(vision.patch_size),
            temporal=int(vision.temporal_patch_size),
            merge=int(vision.spatial_merge_size),
            channels=int(getattr(vision, "in_channels", 3)),
        )


def make_batch(recipe: dict, step: int, geo: Geometry) -> dict:
    """Step `step`'s batch (the same on every rank): each medium of the preset after
    data.text_tokens text tokens, a video's frames as consecutive images. `grpo`: one `mixed`
    prompt whose samples (data.group_size of them) each carry its images, the same pixels."""
    grpo = recipe["data.preset"] == "grpo"
    preset = "mixed" if grpo else str(recipe["data.preset"])
    media = workload(preset, int(recipe["data.seed"]) + step, int(recipe["data.scale"]))
    gen = torch.Generator().manual_seed(1000 + step)
    group = int(recipe["data.group_size"]) if grpo else 1
    if group < 1:
        raise FrameshardError("frameshard train: data.group_size: expected an integer >= 1, got %d" % group)
    frames = [(h, w) for t, h, w in media for _ in range(t)]
    width = geo.channels * geo.temporal * geo.patch**2
    # A GRPO prompt's pixels are drawn once: every sample of its group carries the same images.
    prompt = torch.randn(sum(h * w for h, w in frames), width, generator=gen) if grpo else None
    low, high = geo.text_ids
    text = int(recipe["data.text_tokens"])
    ids: list[int] = []
    for _ in range(group):
        for t, h, w in media:
            ids += torch.randint(low, high, (text,), generator=gen).tolist()
            frame = [geo.vision_start_token_id] + [geo.image_token_id] * (h * w // geo.merge**2)
            ids += (frame + [geo.vision_end_token_id]) * t
        ids += torch.randint(low, high, (text,), generator=gen).tolist()
    input_ids = torch.tensor([ids])
    if prompt is None:
        pixels = torch.randn(sum(h * w for h, w in frames), width, generator=gen)
    else:
        pixels = prompt.repeat(group, 1)
    return dict(
        input_ids=input_ids,
        mm_token_type_ids=(input_ids == geo.image_token_id).long(),
        pixel_values=pixels,
        image_grid_thw=torch.tensor([(1, h, w) for h, w in frames] * group, dtype=torch.int64),
    )
