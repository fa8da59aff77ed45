"""Split frames in transformers vision towers: `hf.enable` with `split_frames: true`.

A frame larger than a rank's share is cut into pieces (contiguous ranges of its patch rows, in
the processor's row order) held by several ranks. For a piece to encode exactly as the rows of
the whole frame would, two things change on the vision module INSTANCE (the classes are
untouched; `hf.disable` restores both):

- positions: the tower call passes transformers' own precomputed-geometry kwargs
  (`transformers.vision_utils`: `position_ids`, `cu_seqlens`, Qwen2.5-VL's `window_index` /
  `cu_window_seqlens`, Qwen3-VL / Qwen3.5's `interp_indices` / `interp_weights`), computed from
  the whole frame and restricted to the piece's rows, instead of letting the forward derive them
  from a piece-sized grid. GLM-4V's learned position table reads the whole frame's (h, w) from its
  grid row and the piece's (h, w) coordinates from `position_ids`.
- attention: the `forward` of the attention of every full-attention block (all blocks;
  Qwen2.5-VL: `fullatt_block_indexes`) is replaced on the instance by `_split_attention`. It
  projects and rotates q, k, v as the class does (the module's own `qkv`, `proj` and its
  modeling file's `apply_rotary_pos_emb_vision`), exchanges the rotated keys and values of all
  local rows once per layer through the runtime's PieceExchange (every rank, in layer order,
  also one without pieces), and lets a piece's queries attend to its whole frame's keys and
  values through transformers' attention interface (eager or sdpa); whole frames attend within
  themselves, as the class's non-flash path does. Outside a split call it runs the class's
  forward. Window blocks, MLPs, norms, mergers and DeepStack mergers are unchanged (local).

What it relies on is checked at `enable` by feature detection (frameshard.hf._compat): the
`transformers.vision_utils` helpers through which the vision forward takes precomputed geometry,
and per full-attention block an attention with `qkv`, `proj`, `num_heads`, `scaling`, next to its
modeling file's `apply_rotary_pos_emb_vision` and attention interface; a missing piece is named.
Refused at `enable` too: flash attention implementations (the varlen call of a piece against its
whole frame is not wired) and, during a split call, HF gradient checkpointing inside the tower
(its recomputation would run the attention without the exchange; wrap the whole vision module in
torch.utils.checkpoint instead).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .._C import FrameshardError
from . import _compat
from ._family import Family

# The attribute holding the running split call, on the vision module and its patched attentions.
_HOLDER = "_frameshard_split"


@dataclasses.dataclass
class _Call:
    """One split tower call: its pieces and exchange, and how many exchanges it ran."""

    pieces: tuple
    exchange: Callable[[torch.Tensor], list]
    exchanges: int = 0


class _Holder:
    """Shared by the patched attention modules of one vision module: the running split call."""

    def __init__(self) -> None:
        self.call: _Call | None = None


def _refuse(what: str) -> FrameshardError:
    return FrameshardError("frameshard.hf.enable: split_frames: expected %s" % what)


def check(visual: torch.nn.Module, family: Family) -> None:
    """Raises FrameshardError unless `visual` has what split frames patch (feature detection)."""
    if family.split is None:
        raise _refuse("a family whose frames can be cut (%s), got %s" % ("a whole-tower vision module", family.name))
    impl = str(getattr(visual.config, "_attn_implementation", None) or "eager")
    if "flash" in impl:
        raise _refuse(
            "an eager or sdpa attention implementation (a piece's varlen flash call against its "
            "whole frame is not wired), got %r" % impl
        )
    blocks = family.split.full_attention_blocks(visual)
    missing = _compat.missing_split_features(visual, family.split.helpers, blocks)
    if missing:
        raise _refuse(
            "a %s with %s (transformers %s), got one without %s"
            % (
                type(visual).__name__,
                "precomputed vision geometry and a patchable attention",
                _compat.transformers_version(),
                "; ".join(missing),
            )
        )


def patches(visual: torch.nn.Module, family: Family) -> list[tuple[Any, str, Any]]:
    """The instance patches of split frames on `visual`: the attention forward of every
    full-attention block, sharing one holder of the running split call (see the docstring)."""
    holder = _Holder()
    out: list[tuple[Any, str, Any]] = [(visual, _HOLDER, holder)]
    for i in family.split.full_attention_blocks(visual):
        attn = visual.blocks[i].attn
        out.append((attn, _HOLDER, holder))
        out.append((attn, "forward", types.MethodType(_split_attention, attn)))
    return out


def _split_attention(
    self: torch.nn.Module,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    max_seqlen: int | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """A full-attention block's attention during a split call (see the module docstring)."""
    call = self.__dict__[_HOLDER].call
    if call is None:
        return type(self).forward(self, hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs)
    module = _compat.modeling_module(self)
    rows = hidden_states.shape[0]
    q, k, v = self.qkv(hidden_states).reshape(rows, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
    cos, sin = position_embeddings
    q, k = module.apply_rotary_pos_emb_vision(q, k, cos, sin)
    width = k.shape[1] * k.shape[2]
    with torch.profiler.record_function("frameshard.exchange"):
        outs = call.exchange(torch.cat([k.reshape(rows, width), v.reshape(rows, width)], dim=1))
    call.exchanges += 1
    if len(outs) != 1 + len(call.pieces):
        raise FrameshardError(
            "frameshard.hf: expected the exchange to return the local rows and one tensor per "
            "piece (%d), got %d" % (1 + len(call.pieces), len(outs))
        )

    def heads(t: torch.Tensor) -> torch.Tensor:  # [n, width] -> [1, heads, n, head_dim] (a view)
        return t.reshape(t.shape[0], self.num_heads, -1).transpose(0, 1).unsqueeze(0)

    # Keys and values by split, not by slicing: a slice's backward writes into a zero tensor of
    # the whole [rows, 2 * width] (one each), split's is one cat.
    k_all, v_all = outs[0].split(width, dim=1)
    interface = module.ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, module.eager_attention_forward
    )
    piece_of = {int(p.frame): j for j, p in enumerate(call.pieces)}
    cu = [int(c) for c in cu_seqlens.tolist()]
    lengths = [b - a for a, b in zip(cu[:-1], cu[1:], strict=True)]
    # One split per tensor, not a slice per frame: a slice's backward writes its rows into a
    # zero tensor of the whole input, so per-frame slices cost frames x rows in the backward
    # (on a 365-frame batch at CP 4, a third of the split step's CPU); split's is one cat.
    q_parts = torch.split(q.transpose(0, 1).unsqueeze(0), lengths, dim=2)
    k_parts, v_parts = torch.split(k_all, lengths), torch.split(v_all, lengths)
    attended = []
    for s in range(len(cu) - 1):
        j = piece_of.get(s)
        if j is not None:  # a piece: its whole frame's keys and values
            keys, values = (heads(t) for t in outs[1 + j].split(width, dim=1))
        else:
            keys, values = heads(k_parts[s]), heads(v_parts[s])
        attended.append(
            interface(
                self,
                q_parts[s],
                keys,
                values,
                attention_mask=None,
                scaling=self.scaling,
                dropout=0.0 if not self.training else self.attention_dropout,
                is_causal=False,
                **kwargs,
            )[0]
        )
    out = torch.cat(attended, dim=1) if attended else q.new_zeros(1, 0, self.num_heads, q.shape[-1])
    return self.proj(out.reshape(rows, -1).contiguous())


def _local_rows(grid: torch.Tensor, pieces: Sequence[Any]) -> torch.Tensor:
    """int64 index of every local row among the rows of the whole frames of `grid` (a piece
    frame's grid row is its whole frame)."""
    by_frame = {int(p.frame): p for p in pieces}
    index, whole, frame = [], 0, 0
    for t, h, w in grid.tolist():
        for _ in range(int(t)):
            p = by_frame.get(frame)
            begin, end = (int(p.begin), int(p.end)) if p is not None else (0, int(h * w))
            index.append(torch.arange(whole + begin, whole + end))
            whole += int(h * w)
            frame += 1
    return torch.cat(index) if index else torch.zeros(0, dtype=torch.int64)


def piece_geometry(
    visual: torch.nn.Module, family: Family, grid: torch.Tensor, cu: torch.Tensor, pieces: Sequence[Any]
) -> dict[str, Any]:
    """The precomputed-geometry kwargs of a local input with pieces: positions of the whole
    frames restricted to the local rows, the plan's per-frame segments and the family's own
    (windows, interpolated position tables)."""
    from transformers import vision_utils  # noqa: PLC0415  (transformers is optional)

    local = _local_rows(grid, pieces).to(grid.device)
    geo: dict[str, Any] = {
        "position_ids": vision_utils.get_vision_position_ids(grid, int(visual.spatial_merge_size)).index_select(
            0, local
        ),
        "cu_seqlens": cu.to(device=grid.device, dtype=torch.int32),
    }
    if family.split.geometry is not None:
        geo.update(family.split.geometry(visual, grid, pieces, local))
    return geo


def run_split(
    visual: torch.nn.Module,
    family: Family,
    run: Callable[..., Any],
    grid: torch.Tensor,
    cu: torch.Tensor,
    pieces: Sequence[Any],
    exchange: Callable[[torch.Tensor], list] | None,
) -> Any:
    """Runs `run(**geometry)` (the original forward on the local input) as a split call: with
    the piece geometry when this rank holds pieces, and with the patched attention exchanging
    K/V in every full-attention block when the plan split a frame (exchange not None)."""
    if exchange is None:
        return run()
    holder: _Holder = visual.__dict__[_HOLDER]
    if getattr(visual, "gradient_checkpointing", False) and visual.training and torch.is_grad_enabled():
        raise FrameshardError(
            "frameshard.hf: expected gradient checkpointing off inside the vision module with "
            "split_frames (its recomputation would run the attention without the K/V exchange; "
            "wrap the vision module in torch.utils.checkpoint instead), got "
            "gradient_checkpointing=True"
        )
    call = _Call(tuple(pieces), exchange)
    holder.call = call
    try:
        out = run(**(piece_geometry(visual, family, grid, cu, pieces) if pieces else {}))
    finally:
        holder.call = None
    expected = len(family.split.full_attention_blocks(visual))
    if call.exchanges != expected:
        raise FrameshardError(
            "frameshard.hf: expected one K/V exchange per full-attention block (%d), got %d "
            "(a block skipped or ran its attention twice)" % (expected, call.exchanges)
        )
    return out
