"""The layout of one context-parallel (CP) forward of a language model, shared by `_cp` (the CP
language model and its attention), `_cp_owner` (the merge after the split) and `_cp_linear`
(Qwen3.5's linear attention, divided). It imports none of them; they import it.

    fwd = forward_layout(group, "load_balanced", timeout, seq_len, device, agree)  # collective
    rows = pad(embeds, int(fwd.order.numel()) - seq_len, dim=1)[:, fwd.positions]  # this rank's rows
    position_ids = local_position_ids(position_ids, fwd, b, seq_len, device)
    keys = fwd.gather(local_keys)                  # every rank's rows, rank-major

The sequence is padded at its end to `padded_length` and split: chunks r and 2CP-1-r of 2CP
(load_balanced) or chunk r of CP (contiguous) are rank r's rows (`chunk_positions`, the C++
core's split). `Forward` holds one forward's positions, the gathered (rank-major) order and the
causal mask at global positions; it travels down to the attention calls in their kwargs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist

from .. import _C
from .._C import FrameshardError
from .._groups import Timeout
from .._shard import all_gather_rows
from .._unwrap import describe, unwrap_module
from . import _family

SPLITS = ("load_balanced", "contiguous")
# The keyword with which the owner path (_cp_owner) hands the language model's CP forward (_cp)
# this rank's rows, merged and cut already (a `Local`).
LOCAL = "frameshard_cp_local"


def chunk_positions(seq_len: int, cp_size: int, rank: int, split: str) -> torch.Tensor:
    """The global positions (int64, ascending) of `rank`'s rows of a sequence padded to
    `padded_length(seq_len, cp_size, split)`: chunks rank and 2CP-1-rank of 2CP
    (load_balanced), or chunk rank of CP (contiguous). The C++ core's split
    (frameshard/owner_route.h), the one the owner routing and the C++ trainer use."""
    return torch.tensor(_C.chunk_positions(int(seq_len), int(cp_size), int(rank), split), dtype=torch.int64)


def padded_length(seq_len: int, cp_size: int, split: str) -> int:
    """`seq_len` rounded up to a multiple of 2 x cp_size (load_balanced) or cp_size."""
    return int(_C.padded_length(int(seq_len), int(cp_size), split))


def pad(x: torch.Tensor, count: int, dim: int, value: Any = 0) -> torch.Tensor:
    """x with `count` entries of `value` appended on `dim` (the end padding of the split)."""
    if count == 0:
        return x
    shape = list(x.shape)
    shape[dim] = count
    return torch.cat([x, x.new_full(shape, value)], dim=dim)


@dataclasses.dataclass
class Forward:
    """One forward's layout, shared by its attention calls (and their recomputation under
    activation checkpointing: it travels in the layers' kwargs)."""

    group: dist.ProcessGroup
    timeout: Timeout
    cp_size: int
    seq_len: int  # the whole sequence's length, before the end padding
    positions: torch.Tensor  # this rank's global positions [local]
    order: torch.Tensor  # the gathered rows' global positions [padded], rank-major
    inverse: torch.Tensor  # gathered row index of each global position [padded]
    calls: list  # the attention calls made (the test checks that only text layers call)
    mask_: torch.Tensor | None = None

    @property
    def mask(self) -> torch.Tensor:
        """[local, padded] bool: gathered key's position <= query position (built on first use,
        by the masked attention only: the CPU kernel needs none)."""
        if self.mask_ is None:
            self.mask_ = self.order[None, :] <= self.positions[:, None]
        return self.mask_

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        """[local, ...] -> [padded, ...] in rank-major order (differentiable; collective)."""
        n = rows.shape[0]
        flat = all_gather_rows(rows.reshape(n, -1).contiguous(), [n] * self.cp_size, self.group, timeout=self.timeout)
        return flat.view(self.cp_size * n, *rows.shape[1:])

    def whole(self, hidden: torch.Tensor) -> torch.Tensor:
        """This rank's rows [B, local, ...] -> the whole sequence [B, seq_len, ...] in sequence
        order, end padding dropped (differentiable: backward, the SUM over ranks of the gradient
        of each rank's rows; collective)."""
        rows = self.gather(hidden.transpose(0, 1).contiguous())  # [padded, B, ...], rank-major
        return rows[self.inverse[: self.seq_len]].transpose(0, 1)


@dataclasses.dataclass
class Local:
    """What the owner path hands the language model's CP forward (under the keyword `LOCAL`):
    the layout and the extra inputs (DeepStack) already cut to this rank's rows."""

    layout: Forward
    extra: dict


def forward_layout(
    group: dist.ProcessGroup, split: str, timeout: Timeout, seq_len: int, device: torch.device, agree: torch.Tensor
) -> Forward:
    """One forward's layout over `group`, after checking that every rank passes the same shapes
    `agree` (one small all-gather; a disagreement raises the same error on every rank)."""
    cp, rank = group.size(), group.rank()
    seen = all_gather_rows(agree.view(1, -1).to(device), [1] * cp, group, timeout=timeout)
    if not bool((seen == seen[:1]).all()):
        raise FrameshardError(
            "frameshard.hf.context_parallel: expected every rank to pass the same whole "
            "batch (batch, sequence, hidden), got %s" % [tuple(int(v) for v in row) for row in seen.cpu()]
        )
    positions = chunk_positions(seq_len, cp, rank, split).to(device)
    order = torch.cat([chunk_positions(seq_len, cp, r, split) for r in range(cp)]).to(device)
    return Forward(
        group=group,
        timeout=timeout,
        cp_size=cp,
        seq_len=int(seq_len),
        positions=positions,
        order=order,
        inverse=torch.argsort(order),
        calls=[],
    )


def local_position_ids(
    position_ids: torch.Tensor | None, fwd: Forward, b: int, s: int, device: torch.device
) -> torch.Tensor:
    """This rank's position ids ([..., B, local]) of the whole sequence's ([..., B, S]; None: text
    only, which transformers would count from 0 on the local rows): continued over the end
    padding (never attended: it comes last), then cut at `fwd.positions`."""
    if position_ids is None:
        position_ids = torch.arange(s, device=device).expand(b, s)
    count = int(fwd.order.numel()) - s
    if count:
        step = torch.arange(1, count + 1, device=position_ids.device)
        position_ids = torch.cat([position_ids, position_ids[..., -1:] + step], dim=-1)
    return position_ids[..., fwd.positions.to(position_ids.device)]


def owner_of_positions(fwd: Forward) -> torch.Tensor:
    """The CP rank holding each position of the padded sequence (int64 [padded], CPU): the
    gathered order is rank-major, each rank's rows equally many."""
    cp, padded = fwd.cp_size, int(fwd.order.numel())
    owners = torch.empty(padded, dtype=torch.int64)
    owners[fwd.order.cpu()] = torch.arange(cp).repeat_interleave(padded // cp)
    return owners


def refuse_unsupported(attention_mask: Any, cache: Any, kwargs: dict) -> None:
    """What the CP forward does not support, refused before any collective (the same on every
    rank, whose inputs are the same)."""
    is_2d = isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2
    if attention_mask is not None and not (is_2d and bool((attention_mask == 1).all())):
        raise FrameshardError(
            "frameshard.hf.context_parallel: expected attention_mask None or all ones (causal "
            "attention over the whole sequence; right-pad with labels -100 instead), got %s"
            % ("a padding mask" if is_2d else type(attention_mask).__name__)
        )
    if cache is not None and cache.get_seq_length() > 0:
        raise FrameshardError(
            "frameshard.hf.context_parallel: expected no KV cache (training or a whole-sequence "
            "forward), got a cache of %d tokens" % int(cache.get_seq_length())
        )
    if kwargs.get("output_attentions"):
        raise FrameshardError("frameshard.hf.context_parallel: expected output_attentions unset, got True")


def find_language_model(model: Any, fn: str = "context_parallel") -> torch.nn.Module:
    """The transformers language model (`...TextModel`) of `model` (a ...ForConditionalGeneration,
    its `.model`, or the language model; training wrappers seen through as hf.enable does);
    FrameshardError otherwise."""
    root = unwrap_module(model)
    inner = getattr(root, "model", None)
    for c in (root, getattr(root, "language_model", None), getattr(inner, "language_model", None)):
        c = unwrap_module(c) if c is not None else None
        if c is not None and _family.of_text(c) is not None:
            return c
    raise FrameshardError(
        "frameshard.hf.%s: expected a transformers model of a family with context parallelism or "
        "its language model (a subclass of %s), got %s" % (fn, ", ".join(_family.class_names("text")), describe(model))
    )
