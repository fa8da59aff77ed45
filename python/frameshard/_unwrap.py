"""Seeing through the wrappers trainers put around a model (torch.compile, DDP, FSDP1,
checkpoint_wrapper, PEFT), so that frameshard patches the module that actually runs."""

from __future__ import annotations

import sys
from typing import Any

import torch


def _wrapped_module(module: Any) -> Any:
    """The module a training wrapper holds, or None when `module` is none of: torch.compile's
    OptimizedModule (`_orig_mod`), checkpoint_wrapper (`_checkpoint_wrapped_module`),
    DistributedDataParallel and FSDP1 (`.module`), a PEFT model (`get_base_model()`) or tuner
    (`.model`). A wrapper's package is imported when an instance of it exists, so only imported
    ones are checked (importing torch.distributed.fsdp or peft here would cost seconds)."""
    if isinstance(module, torch.nn.Module):
        for name in ("_orig_mod", "_checkpoint_wrapped_module"):
            if name in module._modules:
                return module._modules[name]
        if isinstance(module, torch.nn.parallel.DistributedDataParallel):
            return module.module
        fsdp = sys.modules.get("torch.distributed.fsdp")
        if fsdp is not None and isinstance(module, fsdp.FullyShardedDataParallel):
            return module.module
    peft = sys.modules.get("peft")
    if peft is not None and hasattr(module, "peft_config"):
        if callable(getattr(module, "get_base_model", None)):
            return module.get_base_model()  # PeftModel / PeftMixedModel -> the transformers model
        if isinstance(module, peft.tuners.tuners_utils.BaseTuner):
            return module.model  # LoraModel and the like (PeftModel.base_model)
    return None


def unwrap_module(module: Any) -> Any:
    """`module` without its training wrappers (torch.compile, DDP, FSDP1, checkpoint_wrapper,
    PEFT), however nested. FSDP2's `fully_shard` and `replicate` keep the instance (they only
    derive its class): unchanged."""
    seen: set[int] = set()
    while id(module) not in seen:
        seen.add(id(module))
        inner = _wrapped_module(module)
        if inner is None:
            break
        module = inner
    return module


def describe(module: Any) -> str:
    """ "DistributedDataParallel wrapping Qwen2VLForConditionalGeneration" and the like."""
    names = [type(module).__name__]
    inner = unwrap_module(module)
    if inner is not module:
        names.append(type(inner).__name__)
    return " wrapping ".join(names)
