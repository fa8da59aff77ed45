"""Collectives: `all_gather_rows` (differentiable) and `shard_vision` (sharded tower call).

Both are collective: every rank of the group must call them, with the same counts / grid_thw and
config (with a `Mesh`, each rank its own replica's grid_thw). The GIL is released while the C++
collectives run; a Python tower is called back with it.

The tower is a `Tower` (`tower(pixel_values, grid_thw, cu_seqlens)`); with `split_frames: true` a
`PieceTower`, which declares the keyword parameters `pieces` and `exchange` and may receive a piece
of a frame -- a contiguous range of its patch rows, a `FramePiece` -- instead of whole frames.
`TowerGeometry` says how its patches make tokens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, Union

import torch
import torch.distributed as dist

from . import _C, _groups, _online
from ._C import FrameshardError
from ._config import FrameShardingConfig
from ._groups import Mesh, Timeout, millis
from ._plan import DedupCounts, GridLike, MeshChoice, Plan, grid_tensor, plan_from_dict
from ._towers import TowerDims, resolve_dims

_LOG = logging.getLogger("frameshard")

TowerOutput = Union[torch.Tensor, Sequence[torch.Tensor]]  # noqa: UP007  (evaluated at import)
Exchange = Callable[[torch.Tensor], list]


@dataclasses.dataclass(frozen=True)
class TowerGeometry:
    """How a tower turns patches into tokens, which the plan's frame units follow (C++:
    frameshard::MediaLayout, include/frameshard/frames.h). Qwen-VL's are the defaults.

    Attributes:
        spatial_merge_size: the merger's side: merge x merge patches make one output token.
        temporal_patch_size: frames per temporal patch (a pixel row holds that many frames).
    """

    spatial_merge_size: int = 2
    temporal_patch_size: int = 2


class FramePiece(NamedTuple):
    """A piece of a split frame, as a tower that takes pieces receives it (include/frameshard/
    frames.h FramePiece): this rank holds rows [begin, end) of local frame `frame` (its cu_seqlens
    segment), in the processor's row order, of a whole frame of h x w patches. begin and end are
    multiples of merge^2 (whole merged tokens) and, for a window-attention tower, of
    window_side * w (whole window rows) or end at the frame's end."""

    frame: int
    begin: int
    end: int
    h: int
    w: int

    @property
    def rows(self) -> int:
        return self.end - self.begin


class Tower(Protocol):
    """What `shard_vision` calls on every rank: the tower on this rank's frames, each frame encoded
    independently (a torch.nn.Module whose forward takes these is one).

    Args:
        pixel_values: the local patch rows [local_patch_rows, features].
        grid_thw: the local int64 grid [rows, 3]: consecutive frames of one media item merged into
            one (count, h, w) row, then floor-padding and dummy zero frames (their outputs are
            dropped).
        cu_seqlens: int32, one segment per frame.

    Returns one [tokens, hidden] tensor or a tuple/list of them (e.g. embeddings and DeepStack
    features), of one dtype.
    """

    def __call__(
        self, pixel_values: torch.Tensor, grid_thw: torch.Tensor, cu_seqlens: torch.Tensor, /
    ) -> TowerOutput: ...


class PieceTower(Protocol):
    """A `Tower` that takes pieces, which `config.split_frames` requires (a tower without the keyword
    parameters `pieces` and `exchange` -- a bare **kwargs does not count -- is refused with an
    error naming split_frames). It is always called with them:

    pieces: a tuple of FramePiece, the local frames of which this rank holds only rows [begin,
        end). Such a frame has its own grid row (1, h, w), the WHOLE frame's geometry, and its
        cu_seqlens segment counts the piece's rows.
    exchange: None when the plan split nothing, else a callable. Contract, as frameshard's C++
        towers keep it: positions (rotary ids, learned position tables, windows) come from the
        whole frame at the piece's rows; in every full-attention layer, in layer order, call
        `outs = exchange(rows)` exactly once -- EVERY rank, also one without pieces -- with rows =
        [local rows, F] (all local rows, e.g. torch.cat([k, v], 1) flattened over heads, in the
        tower's current row order); use outs[0] in place of rows (same values, tied to the
        collective so that its backward runs on every rank) and outs[1 + j], the whole frame's rows
        of pieces[j] (every holder's rows, in rank order), as the keys and values that piece's
        queries attend to. Layers that attend within windows of a piece, MLPs, norms and mergers
        stay local. The exchange is differentiable (its backward returns each row's gradient to
        the rank that sent it) and collective; it releases the GIL, is valid only during the call
        that received it, and a rank whose tower raises makes every peer's next exchange raise the
        same FrameshardError.
    exchanges_per_call (optional attribute): the exchanges the tower makes per split call. Then
        only the first opens with a consensus (each is a collective and, on CUDA, a host sync); a
        rank whose tower raises after it sends zeros through its peers' remaining exchanges, and
        every rank raises the same FrameshardError when the call ends; a tower making another
        number of exchanges raises too.
    """

    def __call__(
        self,
        pixel_values: torch.Tensor,
        grid_thw: torch.Tensor,
        cu_seqlens: torch.Tensor,
        /,
        *,
        pieces: tuple[FramePiece, ...],
        exchange: Exchange | None,
    ) -> TowerOutput: ...


def exchanges_per_call(tower: object) -> int:
    """The K/V exchanges a PieceTower declares it makes per split call (its `exchanges_per_call`
    attribute, one per full-attention layer), or 0 (undeclared: every exchange opens with a
    consensus). Declared, only the first does: a consensus is a collective (on CUDA a host sync)
    per layer, and a rank whose tower fails after the first sends zeros through the rest."""
    n = getattr(tower, "exchanges_per_call", 0)
    if n is None:
        return 0
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise FrameshardError(
            "frameshard.shard_vision: expected the tower's exchanges_per_call to be an int >= 0, got %r" % (n,)
        )
    return n


def takes_pieces(tower: object) -> bool:
    """Whether `tower` declares the keyword parameters `pieces` and `exchange` (a bare **kwargs
    does not count): shard_vision then calls it with them and lets the plan split frames."""
    # An nn.Module's own signature is its __call__'s (*args, **kwargs): read its forward.
    fn = tower.forward if isinstance(tower, torch.nn.Module) else tower
    try:
        params = inspect.signature(fn).parameters  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return all(name in params and params[name].kind in keyword for name in ("pieces", "exchange"))


def all_gather_rows(
    tensor: torch.Tensor,
    counts: Sequence[int] | None = None,
    group: dist.ProcessGroup | None = None,
    *,
    timeout: Timeout = None,
) -> torch.Tensor:
    """Differentiable variable-size all-gather along dim 0.

    Rank r passes `tensor` with counts[r] rows; every rank returns the concatenation over ranks in
    rank order. Backward: rank r gets the SUM over ranks of the gradient of its rows (a
    reduce-scatter-v), so with the usual gradient all-reduce the result equals the replicated path.
    `counts=None` exchanges the counts first. Collective; any dtype; a rank may send 0 rows.
    """
    pg, _ = _groups.resolve(group, "all_gather_rows")
    return _C.all_gather_rows(tensor, [int(c) for c in (counts or [])], pg, millis(timeout))


def _trainable(tower: object) -> bool:
    if isinstance(tower, torch.nn.Module):
        return any(p.requires_grad for p in tower.parameters())
    return True


def shard_vision(
    tower: Tower | PieceTower,
    pixel_values: torch.Tensor,
    grid_thw: GridLike,
    group: Any = None,
    config: FrameShardingConfig | None = None,
    *,
    geometry: TowerGeometry = TowerGeometry(),
    cp_size: int | None = None,
    tower_trainable: bool | None = None,
    timeout: Timeout = None,
    return_plan: bool = False,
    token_owner: Sequence[int] | None = None,
    tower_dims: TowerDims | None = None,
    mesh: Mesh | None = None,
    media_keys: Sequence[Any] | None = None,
) -> TowerOutput | None | tuple[TowerOutput | None, Plan]:
    """Runs `tower` on this rank's frames only and returns every frame's outputs, gathered in order.

    Collective over the group: every rank passes the same pixel_values, grid_thw and config (with a
    mesh, its replica's media). A failure on any rank raises FrameshardError on every rank.

    Args:
        tower: a `Tower`, `tower(pixel_values, grid_thw, cu_seqlens)` on this rank's frames; with
            config.split_frames a `PieceTower` (also keyword parameters `pieces`, `exchange`).
        pixel_values, grid_thw: every media item's packed patch rows [sum(t*h*w), features] and
            its (t, h, w) rows in patches.
        group: a ProcessGroup, a DeviceMesh, a frameshard.Mesh, or None (the default group).
        config: None is FrameShardingConfig(enabled=True).
        geometry: the tower's `TowerGeometry` (default: Qwen-VL's, merge 2, temporal patch 2).
        cp_size: must equal the group's size; None: the group's size.
        tower_trainable: None: inferred for an nn.Module, else True.
        timeout: seconds (or timedelta) for the collectives; None: the group's default.
        token_owner: with config.gather "owner", the CP rank consuming each visual token
            (visual_token_owners): each rank then receives only its tokens' rows.
        tower_dims: the sizes `cost_alpha: auto` counts; None: a transformers module's, else the
            config's `tower` preset.
        mesh: a dp x cp `Mesh` (group and cp_size unset): all replicas' frames over the mesh.
        media_keys: with config.dedup, one id per grid_thw row instead of hashing the pixels.

    Returns the gathered [total_tokens, hidden] output (a tuple when the tower returns a sequence),
    differentiable; with a mesh, this replica's rows (None on a replica without media when the
    mesh replicates); and the Plan if `return_plan`. Tower and PieceTower state the tower's
    contract; the docs the rest: docs/python-wrappers.md (meshes), docs/python-reference.md (the
    owner gather), docs/python-dedup.md (dedup's keys and gradients).
    """
    config = config if config is not None else FrameShardingConfig(enabled=True)
    if mesh is not None and (group is not None or cp_size is not None):
        raise FrameshardError(
            "frameshard.shard_vision: expected group and cp_size unset with a mesh (the Mesh "
            "names its group, dp and cp), got group=%s cp_size=%r" % (_groups.kind(group), cp_size)
        )
    pg, mesh = _groups.resolve(
        mesh if mesh is not None else group, "shard_vision", mesh_dims=config.mesh_dims, cp_size=cp_size
    )
    options = _C.ShardCall()
    options.overrides = config.overrides()
    options.cp_size = int(mesh.cp if mesh is not None else (cp_size if cp_size is not None else pg.size()))
    options.dp = int(mesh.dp if mesh is not None else 1)
    options.spatial_merge_size = int(geometry.spatial_merge_size)
    options.temporal_patch_size = int(geometry.temporal_patch_size)
    options.tower_trainable = bool(_trainable(tower) if tower_trainable is None else tower_trainable)
    options.timeout_ms = millis(timeout)
    options.token_owner = [int(o) for o in token_owner] if token_owner is not None else []
    dims = tower_dims if tower_dims is not None else resolve_dims(tower)
    options.tower_dims = dims.as_dict() if dims is not None else None
    options.takes_pieces = takes_pieces(tower)
    options.tower_exchanges = exchanges_per_call(tower) if options.takes_pieces else 0
    options.dedup = bool(config.dedup)
    if media_keys is not None and not config.dedup:
        raise FrameshardError("frameshard.shard_vision: expected config.dedup True with media_keys, got dedup False")
    options.media_keys = [media_key(k) for k in media_keys] if media_keys is not None else []
    if (config.gather == "owner") != (token_owner is not None):
        raise FrameshardError(
            "frameshard.shard_vision: expected token_owner exactly when config.gather is "
            "'owner', got gather=%r and token_owner %s"
            % (config.gather, "given" if token_owner is not None else "None")
        )
    # A caller of its own (frameshard.hf) names itself in `frameshard_log`: (owner, what). A
    # function tower is known by its code (one learner for a lambda rebuilt every step).
    owner, what = getattr(tower, "frameshard_log", None) or (getattr(tower, "__code__", None) or tower, "shard_vision")
    key = _online.caller_key(owner)
    online = _online.prepare(key, what, pg, options, config, pixel_values)
    options.online = online.cost if online is not None else None
    result, plan = _run(tower, pixel_values, grid_tensor(grid_thw), pg, options, mesh is not None, online)
    log_path(key, plan, what, config)
    return (result, plan) if return_plan else result


def _run(
    tower: Tower | PieceTower,
    pixel_values: torch.Tensor,
    grid: torch.Tensor,
    pg: dist.ProcessGroup,
    options: Any,
    on_mesh: bool,
    online: _online.Online | None = None,
) -> tuple[TowerOutput | None, Plan]:
    """The extension's encode (or encode_mesh) with `tower` called back as the C++ core calls a
    tower: (outputs in the tower's own form, the plan). With `online` the tower is timed."""
    returned_sequence = [False]
    with_pieces = options.takes_pieces

    def call(
        pv: torch.Tensor,
        grid: torch.Tensor,
        cu: torch.Tensor,
        pieces: Sequence[tuple] = (),
        exchange: Exchange | None = None,
    ) -> list[torch.Tensor]:
        def run() -> list[torch.Tensor]:
            if with_pieces:
                out = tower(pv, grid, cu, pieces=tuple(FramePiece(*p) for p in pieces), exchange=exchange)
            else:
                out = tower(pv, grid, cu)
            if isinstance(out, torch.Tensor):
                return [out]
            returned_sequence[0] = True
            return list(out)

        return run() if online is None else online.time_tower(run, tower, pv.device)

    encode = _C.encode_mesh if on_mesh else _C.encode
    returned = encode(call, pixel_values, grid, pg, options)  # a _C.ShardResult
    outputs, dedup, mesh = returned.outputs, returned.dedup, returned.mesh
    result: TowerOutput | None = None  # a text-only replica on the mesh's replicated path
    if outputs:
        result = tuple(outputs) if returned_sequence[0] else outputs[0]
    if online is not None:
        _online.finish(online, returned.plan, pg, on_mesh)
    plan = plan_from_dict(returned.plan)
    if dedup is not None:
        plan = dataclasses.replace(plan, dedup=DedupCounts(**dedup))
    if mesh is not None:
        plan = dataclasses.replace(plan, mesh=MeshChoice(**mesh))
    return result, plan


def deduplicated(plan: Plan) -> bool:
    """Whether the call encoded fewer frame units than it returns (dedup found repeats): the
    tower's own output then holds each distinct frame once, the returned rows each use's."""
    return plan.dedup is not None and plan.dedup.distinct_units < plan.dedup.units


def frame_keys(
    pixel_values: torch.Tensor, grid_thw: GridLike, *, geometry: TowerGeometry = TowerGeometry()
) -> list[tuple[int, int]]:
    """The 128-bit content key (hi, lo) of every frame unit of `grid_thw` -- what config.dedup
    keys frames by: a hash of the unit's pixel rows (two independent 64-bit lanes, each mixing
    every element with its column and every row with its index in the frame), its dtype and its
    shape, computed with tensor ops on the pixels' device; `geometry` as shard_vision takes it. Not
    collective."""
    layout = int(geometry.spatial_merge_size), int(geometry.temporal_patch_size)
    return list(_C.frame_keys(pixel_values, grid_tensor(grid_thw), *layout))


def media_key(key: Any) -> tuple[int, int]:
    """A media id (str, bytes, int or a tuple of them) as the 128-bit key (hi, lo) the C++ core
    takes: blake2b of its type-tagged bytes, so "1" and 1 differ."""
    if isinstance(key, tuple):
        data = b"t" + b"".join(b"%d:" % len(p) + p for p in (repr(media_key(k)).encode() for k in key))
    elif isinstance(key, bytes):
        data = b"b" + key
    elif isinstance(key, str):
        data = b"s" + key.encode("utf-8")
    elif isinstance(key, int) and not isinstance(key, bool):
        data = b"i" + str(key).encode()
    else:
        raise FrameshardError(
            "frameshard.shard_vision: media_keys: expected str, bytes, int or a tuple of them, got %s"
            % type(key).__name__
        )
    digest = hashlib.blake2b(data, digest_size=16).digest()
    return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")


# The path (sharded or replicated, split or not) each caller took last: logged on a change only.
_LAST_PATH: dict[Any, tuple[str, bool]] = {}
_online.FORGET.append(lambda key: _LAST_PATH.pop(key, None))


def log_path(key: Any, plan: Plan, what: str, config: FrameShardingConfig) -> None:
    """Logs (logger "frameshard", INFO) which path a sharded call took and why -- once per change
    of path for `key` (a caller: a tower's code, a vision module), not once per step."""
    path = (plan.path, plan.split)
    if _LAST_PATH.get(key) == path:
        return
    _LAST_PATH[key] = path
    if plan.dedup is not None:
        d = plan.dedup
        what = "%s (dedup: %d of %d frames distinct)" % (what, d.distinct_units, d.units)
    if plan.sharded:
        split = "whole frames"
        if plan.split:
            split = "frames cut across ranks (bottleneck %.4g, whole frames %.4g)" % (
                max(plan.rank_costs),
                plan.unsplit_max_cost,
            )
        elif config.split_frames:
            split = "whole frames (no cut lowers the bottleneck by split_min_gain %g)" % config.split_min_gain
        _LOG.info("%s: sharded over %d ranks, %s, %s: %s", what, plan.world, plan.partitioner, split, plan.reason)
    else:
        _LOG.info("%s: replicated on each of %d ranks: %s", what, plan.world, plan.reason)


def visual_token_owners(
    media_positions: Sequence[int], seq_len: int, cp_size: int, split: str = "load_balanced"
) -> list[int]:
    """The CP rank that owns each visual token, for shard_vision(..., token_owner=...).

    Args:
        media_positions: the sequence positions of the visual tokens, ascending (e.g. where
            input_ids equals the image or video token id).
        seq_len: the sequence length (a multiple of cp_size, of 2 * cp_size for load_balanced).
        cp_size: the CP size.
        split: "load_balanced" (2 x CP chunks, rank r holds chunks r and 2CP-1-r) or
            "contiguous".
    """
    return list(_C.visual_token_owners([int(p) for p in media_positions], int(seq_len), int(cp_size), split))
