"""The batches of `python -m frameshard train|ab` (cli/_ab.py): the C++ core's seeded presets as one
prompt of a transformers Qwen-VL model, and GRPO groups of one prompt's samples."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from .. import _C
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


def _mix(x: int) -> int:
    """SplitMix64's finalizer (as the C++ data_batch.cpp's step_seed), 63 bits."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return (x ^ (x >> 31)) >> 1


_MASK = 2**64 - 1


def replica_seeds(recipe: dict, step: int, replica: int) -> tuple[int, int]:
    """(preset seed, pixel and text seed) of a step of DP replica `replica`. Replica 0 keeps the
    seeds the commands always drew (data.seed + step, 1000 + step), so dp 1 is unchanged; another
    replica's are mixed from (seed, step, replica) as the C++ trainer's, since a plain seed +
    replica would give replica 1 at step 0 the batch of replica 0 at step 1."""
    seed = int(recipe["data.seed"]) + step
    if replica == 0:
        return seed, 1000 + step
    mixed = _mix(_mix(seed) ^ (replica * 0x9E3779B97F4A7C15 & _MASK))
    return mixed, _mix(mixed)


def make_batch(recipe: dict, step: int, geo: Geometry, replica: int = 0) -> dict:
    """Step `step`'s batch of DP replica `replica` (the same on its CP ranks): each medium of the
    preset after data.text_tokens text tokens, a video's frames as consecutive images. `grpo`: one
    prompt (the C++ grpo preset's: grpo_prompt_workload) whose samples (data.group_size of them)
    each carry its images, the same pixels."""
    grpo = recipe["data.preset"] == "grpo"
    preset_seed, seed = replica_seeds(recipe, step, replica)
    scale = int(recipe["data.scale"])
    if grpo:
        media = [tuple(g) for g in _C.grpo_prompt_workload(preset_seed, scale)[0]]
    else:
        media = workload(str(recipe["data.preset"]), preset_seed, scale)
    gen = torch.Generator().manual_seed(seed)
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
