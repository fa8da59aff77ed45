"""Hugging Face adapters: one line gives a transformers Qwen-VL model sharded vision.

    frameshard.hf.enable(model, group, frameshard.FrameShardingConfig(enabled=True))
    ...  # get_image_features / get_video_features, model(...), loss.backward() as before
    frameshard.hf.disable(model)

`enable` replaces the forward of the model's vision module (an attribute on that instance; the
class is untouched) with one that runs the original forward on this rank's frames only, through
`frameshard.shard_vision`, and returns the same output class with the gathered `pooler_output`
(the merged embeddings) and, for Qwen3-VL, the gathered `deepstack_features`. Per-patch fields
(`last_hidden_state`, `hidden_states`, `attentions`) would be rank-local and are None on the
sharded path; on the replicated path (policy below its thresholds) the original output is
returned unchanged. `disable` deletes the instance attribute, restoring the class's forward.

Supported vision modules (transformers 5.24.0 checked; see README.md, "Python package"):
Qwen2-VL, Qwen2.5-VL, Qwen3-VL (DeepStack), Qwen3.5, and the Qwen3-VL-MoE / Qwen3.5-MoE vision
modules (the same module code). Anything else raises FrameshardError naming what was expected.

The forward calls are collective over the group: every rank must run the vision module on the
same pixel_values and grid_thw (as CP ranks of one microbatch do).
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Optional

import torch
import torch.distributed as dist

from ._C import FrameshardError
from .config import FrameShardingConfig
from .shard import Timeout, resolve_group, shard_vision

# Vision module class name -> family.
SUPPORTED_VISION_MODULES = {
    "Qwen2VisionTransformerPretrainedModel": "qwen2_vl",
    "Qwen2_5_VisionTransformerPretrainedModel": "qwen2_5_vl",
    "Qwen3VLVisionModel": "qwen3_vl",
    "Qwen3VLMoeVisionModel": "qwen3_vl_moe",
    "Qwen3_5VisionModel": "qwen3_5",
    "Qwen3_5MoeVisionModel": "qwen3_5_moe",
}

# Precomputed per-batch geometry (transformers' vision_utils) describes the whole batch, not the
# local frames: refused on the sharded path.
_STATE = "_frameshard_state"


@dataclasses.dataclass
class _State:
    group: dist.ProcessGroup
    config: FrameShardingConfig
    cp_size: Optional[int]
    timeout: Timeout
    family: str


def find_vision_module(model: torch.nn.Module) -> torch.nn.Module:
    """The supported vision module of `model` (a ...ForConditionalGeneration, its `.model`, or
    the vision module itself); FrameshardError when there is none."""
    candidates = [model, getattr(model, "visual", None)]
    inner = getattr(model, "model", None)
    if inner is not None:
        candidates.append(getattr(inner, "visual", None))
    for c in candidates:
        if c is not None and type(c).__name__ in SUPPORTED_VISION_MODULES:
            return c
    found = [type(c).__name__ for c in candidates[1:] if c is not None]
    raise FrameshardError(
        "frameshard.hf.enable: expected a transformers Qwen2-VL, Qwen2.5-VL, Qwen3-VL(-MoE) or "
        "Qwen3.5(-MoE) model, or its vision module (%s), got %s%s"
        % (
            ", ".join(SUPPORTED_VISION_MODULES),
            type(model).__name__,
            " with vision module %s" % found[0] if found else " (no .visual or .model.visual)",
        )
    )


def enable(
    model: torch.nn.Module,
    group: Optional[dist.ProcessGroup] = None,
    config: Optional[FrameShardingConfig] = None,
    *,
    cp_size: Optional[int] = None,
    timeout: Timeout = None,
) -> torch.nn.Module:
    """Makes the vision module of `model` shard its frames over `group` (None: the default
    torch.distributed group). `config=None` is FrameShardingConfig(enabled=True); `cp_size`
    (None: the group's size) must equal the group's size, or every rank raises on the first
    forward. Calling it again replaces the group/config. Returns the vision module."""
    visual = find_vision_module(model)
    state = _State(
        group=resolve_group(group, "hf.enable"),
        config=config if config is not None else FrameShardingConfig(enabled=True),
        cp_size=cp_size,
        timeout=timeout,
        family=SUPPORTED_VISION_MODULES[type(visual).__name__],
    )
    setattr(visual, _STATE, state)
    visual.forward = types.MethodType(_sharded_forward, visual)
    return visual


def disable(model: torch.nn.Module) -> bool:
    """Restores the original forward of the vision module; False if it was not enabled."""
    visual = find_vision_module(model)
    if not hasattr(visual, _STATE):
        return False
    del visual.forward  # the instance attribute: the class's forward shows again
    delattr(visual, _STATE)
    return True


def is_enabled(model: torch.nn.Module) -> bool:
    """Whether `enable` is in force on the model's vision module."""
    return hasattr(find_vision_module(model), _STATE)


def _sharded_forward(
    visual: torch.nn.Module, hidden_states: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Any
) -> Any:
    state: _State = getattr(visual, _STATE)
    precomputed = sorted(k for k, v in kwargs.items() if isinstance(v, torch.Tensor))
    if precomputed:
        raise FrameshardError(
            "frameshard.hf: expected no precomputed vision tensors (they describe the whole "
            "batch; each rank encodes only its frames), got %s" % ", ".join(precomputed)
        )
    return_dict = kwargs.pop("return_dict", None)
    original = type(visual).forward
    last: list[Any] = [None]

    def tower(pv: torch.Tensor, grid: torch.Tensor, _cu: torch.Tensor) -> list[torch.Tensor]:
        # The original forward recomputes cu_seqlens, rotary and (Qwen2.5-VL) window indices from
        # the local grid; every one of them is per frame, so the local frames encode as they
        # would in the whole batch.
        out = original(visual, pv, grid_thw=grid, return_dict=True, **kwargs)
        last[0] = out
        return [out.pooler_output] + list(getattr(out, "deepstack_features", None) or [])

    outputs, plan = shard_vision(
        tower,
        hidden_states,
        grid_thw,
        state.group,
        state.config,
        cp_size=state.cp_size,
        spatial_merge_size=int(visual.spatial_merge_size),
        temporal_patch_size=int(visual.config.temporal_patch_size),
        tower_trainable=any(p.requires_grad for p in visual.parameters()),
        timeout=state.timeout,
        return_plan=True,
    )
    out = last[0]
    if plan.sharded and return_dict is False:
        # A tuple would start with last_hidden_state, which is rank-local here.
        raise FrameshardError(
            "frameshard.hf: expected return_dict=True or unset on the sharded path (the sharded "
            "output has no last_hidden_state), got return_dict=False"
        )
    if plan.sharded:
        fields = {"pooler_output": outputs[0]}
        if hasattr(out, "deepstack_features"):
            fields["deepstack_features"] = list(outputs[1:])
        out = type(out)(**fields)
    if return_dict is False:
        return out.to_tuple()
    return out
