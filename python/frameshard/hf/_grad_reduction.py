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

from typing import Any

import torch
import torch.distributed as dist

from .. import _unwrap
from .._C import FrameshardError
from .._unwrap import Reduction

MODES = ("auto", "sum", "mean")


def _error(fn: str, text: str) -> FrameshardError:
    return FrameshardError("frameshard.hf.%s: %s" % (fn, text))


def active_ddp(module: torch.nn.Module) -> Any:
    """The DistributedDataParallel whose forward is running now around `module`, or None.

    It reads DDP's private class attribute `_active_ddp_module` (DDP sets it for TorchDynamo for
    the length of its forward): torch has no public way to find the DDP running around a module,
    and a DDP made around the model after `context_parallel` is seen no other way."""
    ddp = getattr(torch.nn.parallel.DistributedDataParallel, "_active_ddp_module", None)
    if ddp is None or not any(m is module for m in ddp.module.modules()):
        return None
    return ddp


def detect(model: Any, ddp: Any = None, fn: str = "context_parallel") -> Reduction | None:
    """The gradient reduction the model's wrappers apply (the first entry of _unwrap.WRAPPERS that
    reduces, read on the model, then on `ddp`: one seen running around the model, active_ddp), or
    None."""
    seen_on = [model] if ddp is None else [model, ddp]
    for wrapper in _unwrap.WRAPPERS:
        for obj in seen_on if wrapper.reduction is not None else ():
            reduction = wrapper.reduction(obj, fn)
            if reduction is not None:
                return reduction
    return None


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
            "(docs/python-cp.md, Gradients)" % (sorted(peers), reduction.what),
        )
    return reduction.divisor * cp / len(reduction.ranks)
