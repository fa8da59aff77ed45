"""Seeing through the wrappers trainers put around a model, one entry each in `WRAPPERS`, so that
frameshard patches the module that actually runs and reads the gradient reduction in force.

A wrapper is described by how to find the module it holds (`inner`) and, where it reduces
gradients, over which ranks and by what divisor (`reduction`, read by `context_parallel` to scale
its loss: hf/_grad_reduction.py). `unwrap_module` walks `inner`, `hf._grad_reduction.detect` asks
`reduction`. Adding a wrapper (DeepSpeed's engine, say) is one entry here:

    def _deepspeed_inner(module):
        deepspeed = _imported("deepspeed")
        return module.module if deepspeed is not None and isinstance(module, deepspeed.DeepSpeedEngine) else None

    Wrapper("DeepSpeedEngine", inner=_deepspeed_inner, reduction=_deepspeed_reduction)

A wrapper's package is imported when an instance of it exists, so only imported ones are checked
(`_imported`): importing torch.distributed.fsdp or peft here would cost seconds.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ._C import FrameshardError


@dataclasses.dataclass(frozen=True)
class Reduction:
    """A gradient reduction: over the global ranks `ranks`, divided by `divisor`; `what` names it."""

    ranks: frozenset
    divisor: float
    what: str


@dataclasses.dataclass(frozen=True)
class Wrapper:
    """One kind of training wrapper, `name`d in errors. `inner(module)`: the module it holds, or None when `module` is
    not this wrapper (FSDP2 keeps the instance: no inner). `reduction(model, fn)`: the gradient
    reduction this wrapper applies somewhere in `model`, or None (no such wrapper there); `fn`
    names the caller in errors."""

    name: str
    inner: Callable[[Any], Any] | None = None
    reduction: Callable[[Any, str], Reduction | None] | None = None


def _imported(module: str) -> Any:
    return sys.modules.get(module)


def _child(name: str) -> Callable[[Any], Any]:
    """A wrapper that holds its module as the child `name` (torch.compile, checkpoint_wrapper)."""

    def inner(module: Any) -> Any:
        return module._modules.get(name) if isinstance(module, torch.nn.Module) else None

    return inner


def _ddp_inner(module: Any) -> Any:
    return module.module if isinstance(module, torch.nn.parallel.DistributedDataParallel) else None


def _ddp_reduction(model: Any, fn: str) -> Reduction | None:
    """DistributedDataParallel averages over its process group."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return None
    ranks = frozenset(dist.get_process_group_ranks(model.process_group))
    return Reduction(ranks, float(len(ranks)), "DistributedDataParallel over ranks %s" % sorted(ranks))


def _fsdp1_inner(module: Any) -> Any:
    fsdp = _imported("torch.distributed.fsdp")
    return module.module if fsdp is not None and isinstance(module, fsdp.FullyShardedDataParallel) else None


def _fsdp2_groups(module: torch.nn.Module) -> list:
    state = module._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)  # torch >= 2.12: one per parameter set
    if groups is None:
        groups = [getattr(state, "_fsdp_param_group", None)]
    return [g for g in groups if g is not None]


def _fsdp2_reduction(model: Any, fn: str) -> Reduction | None:
    """FSDP2 (fully_shard) reduces over its mesh (shard dim, and replicate dim under HSDP) and
    divides by the mesh's size unless set_gradient_divide_factor set another divisor. Every
    FSDP2 module of the model must agree. torch exposes neither on FSDPModule, so they are read
    from its state (named in the error when a torch release moves them)."""
    fsdp = _imported("torch.distributed.fsdp")
    if fsdp is None or not hasattr(fsdp, "FSDPModule"):  # not imported: no FSDP2 module exists
        return None
    seen = {}
    for module in unwrap_module(model).modules():
        if not isinstance(module, fsdp.FSDPModule):
            continue
        try:
            for group in _fsdp2_groups(module):
                ranks = frozenset(int(r) for r in group.mesh_info.mesh.mesh.flatten().tolist())
                factor = group.gradient_divide_factor
                seen[(ranks, float(factor) if factor is not None else float(len(ranks)))] = True
        except AttributeError as e:
            raise FrameshardError(
                "frameshard.hf.%s: expected FSDP2's mesh and gradient divide factor to be readable on "
                "torch %s, got %s; pass grad_reduction='mean' (FSDP2 averages) or 'sum'" % (fn, torch.__version__, e)
            ) from e
    if not seen:
        return None
    if len(seen) > 1:
        raise FrameshardError(
            "frameshard.hf.%s: expected every FSDP2 module of the model to reduce gradients alike, got %s"
            % (fn, sorted((sorted(r), f) for r, f in seen))
        )
    ranks, divisor = next(iter(seen))
    return Reduction(ranks, divisor, "FSDP2 over ranks %s dividing by %g" % (sorted(ranks), divisor))


def _peft_inner(module: Any) -> Any:
    peft = _imported("peft")
    if peft is None or not hasattr(module, "peft_config"):
        return None
    if callable(getattr(module, "get_base_model", None)):
        return module.get_base_model()  # PeftModel / PeftMixedModel -> the transformers model
    if isinstance(module, peft.tuners.tuners_utils.BaseTuner):
        return module.model  # LoraModel and the like (PeftModel.base_model)
    return None


WRAPPERS: tuple[Wrapper, ...] = (
    Wrapper("torch.compile", inner=_child("_orig_mod")),  # OptimizedModule
    Wrapper("checkpoint_wrapper", inner=_child("_checkpoint_wrapped_module")),
    Wrapper("DDP", inner=_ddp_inner, reduction=_ddp_reduction),
    Wrapper("FSDP1", inner=_fsdp1_inner),  # FullyShardedDataParallel
    Wrapper("FSDP2", reduction=_fsdp2_reduction),  # fully_shard keeps the instance: no inner
    Wrapper("PEFT", inner=_peft_inner),  # PeftModel, or a tuner
)


def wrapper_names() -> str:
    """The wrappers seen through, for errors: "torch.compile, checkpoint_wrapper, ..."."""
    return ", ".join(w.name for w in WRAPPERS)


def _wrapped_module(module: Any) -> Any:
    """The module the first matching wrapper of WRAPPERS holds, or None when `module` is none."""
    for wrapper in WRAPPERS:
        inner = wrapper.inner(module) if wrapper.inner is not None else None
        if inner is not None:
            return inner
    return None


def unwrap_module(module: Any) -> Any:
    """`module` without its training wrappers (WRAPPERS: torch.compile, DDP, FSDP1,
    checkpoint_wrapper, PEFT), however nested. FSDP2's `fully_shard` and `replicate` keep the
    instance (they only derive its class): unchanged."""
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
