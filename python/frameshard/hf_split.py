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

Checked layout: transformers CHECKED_TRANSFORMERS, the vision modules of hf.SUPPORTED_VISION_MODULES
(their attention forwards and rotary functions are one source in that version). Another version,
or a module whose forward does not take the precomputed geometry, is refused at `enable` with a
FrameshardError; so are flash attention implementations (the varlen call of a piece against its
whole frame is not wired: untested here) and HF gradient checkpointing inside the tower during a
split call (its recomputation would run the attention without the exchange; wrap the whole vision
module in torch.utils.checkpoint instead).
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
from typing import Any, Callable, Optional, Sequence

import torch

from ._C import FrameshardError

# transformers versions whose vision-module layout this file was checked against.
CHECKED_TRANSFORMERS = ("5.24.0",)

_HOLDER = "_frameshard_split"

# family -> the precomputed-geometry helpers its forward calls (co_names of the forward).
_FORWARD_HELPERS = {
    "qwen2_vl": ("get_vision_position_ids", "get_vision_attention_seqlens"),
    "qwen2_5_vl": ("get_vision_position_ids", "get_vision_attention_seqlens", "get_vision_window_index"),
    "qwen3_vl": ("get_vision_position_ids", "get_vision_attention_seqlens", "get_vision_interpolation_indices_and_weights"),
    "qwen3_5": ("get_vision_position_ids", "get_vision_attention_seqlens", "get_vision_interpolation_indices_and_weights"),
    "glm4v": ("get_vision_position_ids", "get_vision_attention_seqlens"),
}
_FORWARD_HELPERS["qwen3_vl_moe"] = _FORWARD_HELPERS["qwen3_vl"]
_FORWARD_HELPERS["qwen3_5_moe"] = _FORWARD_HELPERS["qwen3_5"]
_FORWARD_HELPERS["glm4v_moe"] = _FORWARD_HELPERS["glm4v"]


@dataclasses.dataclass
class _Call:
    """One split tower call: its pieces and exchange, and how many exchanges it ran."""

    pieces: tuple
    exchange: Callable[[torch.Tensor], list]
    exchanges: int = 0


class _Holder:
    """Shared by the patched attention modules of one vision module: the running split call."""

    def __init__(self) -> None:
        self.call: Optional[_Call] = None


def _refuse(what: str) -> FrameshardError:
    return FrameshardError("frameshard.hf.enable: split_frames: expected %s" % what)


def _transformers_class(module: Any) -> type:
    for cls in type(module).__mro__:
        if cls.__module__.startswith("transformers."):
            return cls
    return type(module)


def full_attention_blocks(visual: torch.nn.Module, family: str) -> list[int]:
    """The blocks whose attention spans the whole frame (Qwen2.5-VL: fullatt_block_indexes)."""
    depth = len(visual.blocks)
    if family == "qwen2_5_vl":
        return sorted({int(i) for i in visual.fullatt_block_indexes if 0 <= int(i) < depth})
    return list(range(depth))


def check_layout(visual: torch.nn.Module, family: str) -> None:
    """Raises FrameshardError unless `visual` is a module layout split frames were checked on."""
    import transformers  # noqa: PLC0415

    if transformers.__version__ not in CHECKED_TRANSFORMERS:
        raise _refuse(
            "transformers %s (the vision-module layout split frames patch was checked there), "
            "got transformers %s" % (" or ".join(CHECKED_TRANSFORMERS), transformers.__version__)
        )
    impl = str(getattr(visual.config, "_attn_implementation", None) or "eager")
    if "flash" in impl:
        raise _refuse(
            "an eager or sdpa attention implementation (a piece's varlen flash call against its "
            "whole frame is not wired), got %r" % impl
        )
    forward = inspect.unwrap(getattr(_transformers_class(visual), "forward"))
    names = set(getattr(getattr(forward, "__code__", None), "co_names", ()))
    missing = [h for h in _FORWARD_HELPERS[family] if h not in names]
    if missing:
        raise _refuse(
            "a %s forward taking precomputed geometry (%s), got one without %s"
            % (type(visual).__name__, ", ".join(_FORWARD_HELPERS[family]), ", ".join(missing))
        )
    for i in full_attention_blocks(visual, family):
        attn = getattr(visual.blocks[i], "attn", None)
        fields = ("qkv", "proj", "num_heads", "scaling", "config")
        if attn is None or any(not hasattr(attn, f) for f in fields):
            raise _refuse("blocks[%d].attn with %s, got %s" % (i, ", ".join(fields), type(attn).__name__))
        module = sys.modules.get(_transformers_class(attn).__module__)
        if module is None or not hasattr(module, "apply_rotary_pos_emb_vision"):
            raise _refuse("%s next to apply_rotary_pos_emb_vision, got none" % type(attn).__name__)
        if "forward" in attn.__dict__ and not hasattr(attn, _HOLDER):
            raise _refuse("blocks[%d].attn without an instance forward of its own, got one" % i)


def install(visual: torch.nn.Module, family: str) -> None:
    """Patches the attention of the full-attention blocks of `visual` (idempotent)."""
    if hasattr(visual, _HOLDER):
        return
    check_layout(visual, family)
    holder = _Holder()
    for i in full_attention_blocks(visual, family):
        attn = visual.blocks[i].attn
        setattr(attn, _HOLDER, holder)
        attn.forward = types.MethodType(_split_attention, attn)
    setattr(visual, _HOLDER, holder)


def uninstall(visual: torch.nn.Module) -> None:
    """Undoes `install` (a no-op when not installed)."""
    if not hasattr(visual, _HOLDER):
        return
    for block in visual.blocks:
        attn = getattr(block, "attn", None)
        if attn is not None and hasattr(attn, _HOLDER):
            del attn.forward
            delattr(attn, _HOLDER)
    delattr(visual, _HOLDER)


def is_installed(visual: torch.nn.Module) -> bool:
    return hasattr(visual, _HOLDER)


def _split_attention(
    self: torch.nn.Module,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    position_embeddings: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
    max_seqlen: Optional[int] = None,
    **kwargs: Any,
) -> torch.Tensor:
    """A full-attention block's attention during a split call (see the module docstring)."""
    call = getattr(self, _HOLDER).call
    if call is None:
        return type(self).forward(self, hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs)
    module = sys.modules[_transformers_class(self).__module__]
    rows = hidden_states.shape[0]
    q, k, v = self.qkv(hidden_states).reshape(rows, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
    cos, sin = position_embeddings
    q, k = module.apply_rotary_pos_emb_vision(q, k, cos, sin)
    width = k.shape[1] * k.shape[2]
    outs = call.exchange(torch.cat([k.reshape(rows, width), v.reshape(rows, width)], dim=1))
    call.exchanges += 1
    if len(outs) != 1 + len(call.pieces):
        raise FrameshardError(
            "frameshard.hf: expected the exchange to return the local rows and one tensor per "
            "piece (%d), got %d" % (1 + len(call.pieces), len(outs))
        )

    def heads(t: torch.Tensor) -> torch.Tensor:  # [n, width] -> [1, heads, n, head_dim]
        return t.reshape(t.shape[0], self.num_heads, -1).transpose(0, 1).unsqueeze(0)

    k_all, v_all = outs[0][:, :width], outs[0][:, width:]
    interface = module.ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, module.eager_attention_forward
    )
    piece_of = {int(p.frame): j for j, p in enumerate(call.pieces)}
    cu = [int(c) for c in cu_seqlens.tolist()]
    q_heads = q.transpose(0, 1).unsqueeze(0)
    attended = []
    for s in range(len(cu) - 1):
        a, b = cu[s], cu[s + 1]
        j = piece_of.get(s)
        kv = outs[1 + j] if j is not None else None
        keys = heads(kv[:, :width]) if kv is not None else heads(k_all[a:b])
        values = heads(kv[:, width:]) if kv is not None else heads(v_all[a:b])
        attended.append(
            interface(
                self,
                q_heads[:, :, a:b],
                keys,
                values,
                attention_mask=None,
                scaling=self.scaling,
                dropout=0.0 if not self.training else self.attention_dropout,
                is_causal=False,
                **kwargs,
            )[0]
        )
    out = torch.cat(attended, dim=1) if attended else q_heads.new_zeros(1, 0, self.num_heads, q.shape[-1])
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


def _window_grid(visual: torch.nn.Module, grid: torch.Tensor, pieces: Sequence[Any]) -> torch.Tensor:
    """Qwen2.5-VL: `grid` with each piece frame replaced by the band of whole window rows it
    holds, (1, rows / w, w): its windows are the whole frame's windows of those rows, so the
    window layers stay local. Raises unless each piece holds whole window rows."""
    merge = int(visual.spatial_merge_size)
    side = int(visual.window_size) // merge // int(visual.patch_size) * merge  # patch rows
    by_frame = {int(p.frame): p for p in pieces}
    rows, frame = [], 0
    for t, h, w in grid.tolist():
        for _ in range(int(t)):
            p = by_frame.get(frame)
            if p is None:
                rows.append([1, h, w])
            else:
                band = side * w
                if p.begin % band or (p.end % band and p.end != h * w):
                    raise FrameshardError(
                        "frameshard.hf: expected the piece of local frame %d to hold whole window "
                        "rows (rows multiples of %d = window side %d x w %d; plan with the tower's "
                        "own dims, hf.enable does), got rows [%d, %d)" % (frame, band, side, w, p.begin, p.end)
                    )
                rows.append([1, (p.end - p.begin) // w, w])
            frame += 1
    return torch.tensor(rows, dtype=grid.dtype, device=grid.device)


def piece_geometry(
    visual: torch.nn.Module, family: str, grid: torch.Tensor, cu: torch.Tensor, pieces: Sequence[Any]
) -> dict[str, Any]:
    """The precomputed-geometry kwargs of a local input with pieces: positions of the whole
    frames restricted to the local rows, the plan's per-frame segments and (Qwen2.5-VL) the
    windows of each piece's rows."""
    from transformers import vision_utils as vu  # noqa: PLC0415

    merge = int(visual.spatial_merge_size)
    local = _local_rows(grid, pieces).to(grid.device)
    geo: dict[str, Any] = {
        "position_ids": vu.get_vision_position_ids(grid, merge).index_select(0, local),
        "cu_seqlens": cu.to(device=grid.device, dtype=torch.int32),
    }
    if family == "qwen2_5_vl":
        geo["window_index"], geo["cu_window_seqlens"] = vu.get_vision_window_index(
            _window_grid(visual, grid, pieces), merge, int(visual.window_size), int(visual.patch_size)
        )
    if family in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"):
        indices, weights = vu.get_vision_interpolation_indices_and_weights(
            grid,
            num_grid_per_side=visual.num_grid_per_side,
            mode=visual.interpolation_mode,
            align_corners=visual.interpolation_align_corners,
            spatial_merge_size=visual.config.spatial_merge_size,
        )
        geo["interp_indices"] = indices.index_select(0, local.to(indices.device))
        geo["interp_weights"] = weights.index_select(0, local.to(weights.device))
    return geo


def run_split(
    visual: torch.nn.Module,
    family: str,
    run: Callable[..., Any],
    grid: torch.Tensor,
    cu: torch.Tensor,
    pieces: Sequence[Any],
    exchange: Optional[Callable[[torch.Tensor], list]],
) -> Any:
    """Runs `run(**geometry)` (the original forward on the local input) as a split call: with
    the piece geometry when this rank holds pieces, and with the patched attention exchanging
    K/V in every full-attention block when the plan split a frame (exchange not None)."""
    if exchange is None:
        return run()
    holder: _Holder = getattr(visual, _HOLDER)
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
    expected = len(full_attention_blocks(visual, family))
    if call.exchanges != expected:
        raise FrameshardError(
            "frameshard.hf: expected one K/V exchange per full-attention block (%d), got %d "
            "(a block skipped or ran its attention twice)" % (expected, call.exchanges)
        )
    return out
