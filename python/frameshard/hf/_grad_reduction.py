"""The scale `context_parallel`'s loss needs for the gradient reduction in force.

Under CP each rank's loss is its share of its replica's mean (the shares sum to the mean), so a
parameter's true gradient is the SUM over the CP group of the ranks' gradients, averaged over
the data-parallel replicas. A wrapper that reduces gradients over a group G (every rank of this
rank's CP group in it, G a union of whole CP groups) and divides by F gives
(1 / F) * sum_G g = (|G| / (cp * F)) * (the true gradient). So the loss is multiplied by

    scale = F * cp / |G|

- no wrapper (the user SUM-all-reduces over the CP group by hand): F = 1, |G| = cp: 1;
- FSDP2 or DDP averaging over the whole dp x cp mesh (F = |G| = dp * cp): cp;
- FSDP2 with set_gradient_divide_factor(dp) over dp x cp: 1.

A wrapper whose group misses some of this rank's CP peers (DDP or FSDP2 over "dp" alone at
cp > 1) never sums the CP shares: no scale fixes that, so it raises. A DDP is seen when it is the
object given to `context_parallel`, or when the latest forward ran inside its forward (a DDP made
around the model after `context_parallel`, called directly). What cannot be seen: a DDP comm
hook that changes the divisor, and a hand-written reduction other than a SUM over the CP group
(pass `grad_reduction`, see `context_parallel`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist

from .._C import FrameshardError
from .._unwrap import unwrap_module

MODES = ("auto", "sum", "mean")


@dataclasses.dataclass(frozen=True)
class Reduction:
    """A gradient reduction: over the global ranks `ranks`, divided by `divisor`; `what` names it."""

    ranks: frozenset
    divisor: float
    what: str


def _error(fn: str, text: str) -> FrameshardError:
    return FrameshardError("frameshard.hf.%s: %s" % (fn, text))


def active_ddp(module: torch.nn.Module) -> Any:
    """The DistributedDataParallel whose forward is running now around `module` (DDP marks itself
    active for TorchDynamo during its forward), or None."""
    from torch.nn.parallel import DistributedDataParallel  # noqa: PLC0415

    ddp = getattr(DistributedDataParallel, "_active_ddp_module", None)
    if ddp is None or not any(m is module for m in ddp.module.modules()):
        return None
    return ddp


def _ddp(model: Any) -> Reduction | None:
    """DistributedDataParallel averages over its process group."""
    from torch.nn.parallel import DistributedDataParallel  # noqa: PLC0415

    if not isinstance(model, DistributedDataParallel):
        return None
    ranks = frozenset(dist.get_process_group_ranks(model.process_group))
    return Reduction(ranks, float(len(ranks)), "DistributedDataParallel over ranks %s" % sorted(ranks))


def _fsdp2_groups(module: torch.nn.Module) -> list:
    state = module._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)  # torch >= 2.12: one per parameter set
    if groups is None:
        groups = [getattr(state, "_fsdp_param_group", None)]
    return [g for g in groups if g is not None]


def _fsdp2(model: Any, fn: str) -> Reduction | None:
    """FSDP2 (fully_shard) reduces over its mesh (shard dim, and replicate dim under HSDP) and
    divides by the mesh's size unless set_gradient_divide_factor set another divisor. Every
    FSDP2 module of the model must agree."""
    try:
        from torch.distributed.fsdp import FSDPModule  # noqa: PLC0415
    except ImportError:  # torch without FSDP2
        return None
    seen = {}
    for module in unwrap_module(model).modules():
        if not isinstance(module, FSDPModule):
            continue
        try:
            for group in _fsdp2_groups(module):
                ranks = frozenset(int(r) for r in group.mesh_info.mesh.mesh.flatten().tolist())
                factor = group.gradient_divide_factor
                seen[(ranks, float(factor) if factor is not None else float(len(ranks)))] = True
        except AttributeError as e:
            raise _error(
                fn,
                "expected FSDP2's mesh and gradient divide factor to be readable on torch %s, got %s; "
                "pass grad_reduction='mean' (FSDP2 averages) or 'sum'" % (torch.__version__, e),
            ) from e
    if not seen:
        return None
    if len(seen) > 1:
        raise _error(
            fn,
            "expected every FSDP2 module of the model to reduce gradients alike, got %s"
            % sorted((sorted(r), f) for r, f in seen),
        )
    ranks, divisor = next(iter(seen))
    return Reduction(ranks, divisor, "FSDP2 over ranks %s dividing by %g" % (sorted(ranks), divisor))


def detect(model: Any, ddp: Any = None, fn: str = "context_parallel") -> Reduction | None:
    """The gradient reduction the model's wrapper applies, or None (no DDP / FSDP2 seen); `ddp`:
    one seen running around the model (active_ddp)."""
    return _ddp(model) or _ddp(ddp) or _fsdp2(model, fn)


def loss_scale(model: Any, group: dist.ProcessGroup, mode: str, ddp: Any = None, fn: str = "context_parallel") -> float:
    """The factor of this rank's loss share (see the module's docstring) for `mode`: "sum"
    (gradients SUM-reduced over a group of whole CP groups, divided by the replicas: 1), "mean"
    (averaged over such a group: cp), "auto" (read from the model's DDP / FSDP2, or from `ddp`
    seen around the latest forward; else "sum")."""
    cp = group.size()
    if mode == "sum":
        return 1.0
    if mode == "mean":
        return float(cp)
    reduction = detect(model, ddp, fn)
    if reduction is None:
        return 1.0
    peers = frozenset(dist.get_process_group_ranks(group))
    if cp > 1 and not peers <= reduction.ranks:
        raise _error(
            fn,
            "expected the gradient reduction to include this rank's CP group %s (the CP ranks' "
            "gradients are shares to be summed), got %s; reduce over the dp x cp ranks instead "
            "(docs/python.md, Gradients)" % (sorted(peers), reduction.what),
        )
    return reduction.divisor * cp / len(reduction.ranks)
