"""Hugging Face adapters: one line gives a transformers VLM sharded vision (and, optionally,
context parallelism in its language model).

    frameshard.hf.enable(model, group_or_device_mesh, frameshard.FrameShardingConfig(enabled=True))
    ...  # get_image_features / get_video_features, model(...), loss.backward() as before
    frameshard.hf.disable(model)

Supported families (one module each in frameshard/hf/_families; `families()` lists them): Qwen2-VL,
Qwen2.5-VL, Qwen3-VL(-MoE), Qwen3.5(-MoE) and GLM-4.1V / 4.5V(-MoE) are sharded at their vision
module (its forward runs on this rank's frames); Nemotron Omni and PaddleOCR-VL, whose merge lives
outside the vision module, at the model's get_image_features (encoder to projector, per image).
A model is recognised by its class hierarchy, so a subclass or FSDP2's `FSDP<Class>` counts, and
may be held however a trainer holds it: torch.compile, DDP, FSDP1/2, checkpoint_wrapper and PEFT
are seen through, at the top or at `.visual` / `.model.visual`. transformers releases in
SUPPORTED_TRANSFORMERS are supported; another is refused at `enable` by name.

The group: a ProcessGroup, a torch DeviceMesh (the config's `mesh_dims` names its dimensions:
["cp"] its "cp" dimension or a 1-D mesh; ["dp", "cp"] balances every DP replica's frames over the
dp x cp ranks), a frameshard.Mesh, or None (the default group). Anything else is refused at
`enable`. Every patch is on the model's instances, recorded in one registry with one undo
(`disable`, `remove_context_parallel`). The path each call takes (sharded or replicated, split or
not, and why) is logged on logger "frameshard" at INFO, once per change.

The forward calls are collective over the group: every rank runs the vision module on the same
pixel_values and grid_thw (as CP ranks of one microbatch do); with ["dp", "cp"] each rank on its
own replica's, and a replica without media adds `join_without_media(model)` to its loss once per
vision call the others make. See docs/python.md.
"""

from __future__ import annotations

from . import _families  # noqa: F401  (each family module registers itself)
from ._compat import SUPPORTED_TRANSFORMERS
from ._cp import ContextParallel, context_parallel
from ._cp import remove as remove_context_parallel
from ._enable import disable, enable, find_vision_module, is_enabled, join_without_media, plan_inputs
from ._family import families

__all__ = [
    "SUPPORTED_TRANSFORMERS",
    "ContextParallel",
    "context_parallel",
    "disable",
    "enable",
    "families",
    "find_vision_module",
    "is_enabled",
    "join_without_media",
    "plan_inputs",
    "remove_context_parallel",
]
