"""Collectives: `all_gather_rows` (differentiable) and `shard_vision` (sharded tower call).

Both are collective: every rank of the group must call them, with the same counts / grid_thw and
config (with a `Mesh`, each rank its own replica's grid_thw). The GIL is released while the C++
collectives run; a Python tower is called back with it.

Split frames (`split_frames: true`): a tower that declares the keyword parameters `pieces` and
`exchange` may receive a piece of a frame -- a contiguous range of its patch rows -- instead of
whole frames; see `shard_vision` for the contract and `FramePiece`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Union

import torch
import torch.distributed as dist

from . import _C, _groups
from ._C import FrameshardError
from ._config import FrameShardingConfig
from ._groups import Mesh, Timeout, millis
from ._plan import DedupCounts, GridLike, MeshChoice, Plan, grid_tensor, plan_from_dict
from ._towers import TowerDims, resolve_dims

_LOG = logging.getLogger("frameshard")

TowerOutput = Union[torch.Tensor, Sequence[torch.Tensor]]  # noqa: UP007  (evaluated at import)
Tower = Callable[..., TowerOutput]
Exchange = Callable[[torch.Tensor], list]


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
    tower: Tower,
    pixel_values: torch.Tensor,
    grid_thw: GridLike,
    group: Any = None,
    config: FrameShardingConfig | None = None,
    *,
    cp_size: int | None = None,
    spatial_merge_size: int = 2,
    temporal_patch_size: int = 2,
    tower_trainable: bool | None = None,
    timeout: Timeout = None,
    return_plan: bool = False,
    token_owner: Sequence[int] | None = None,
    tower_dims: TowerDims | None = None,
    mesh: Mesh | None = None,
    media_keys: Sequence[Any] | None = None,
) -> TowerOutput | None | tuple[TowerOutput | None, Plan]:
    """Runs `tower` on this rank's frames only and returns the gathered outputs, in order.

    Args:
        tower: any callable `tower(pixel_values, grid_thw, cu_seqlens)` that encodes each frame
            independently. It receives the local pixel rows [local_patch_rows, features], the
            local int64 grid_thw [rows, 3] (consecutive frames of one media item merged into one
            (count, h, w) row, then floor-padding and dummy zero frames, whose outputs are dropped)
            and int32 cu_seqlens (one segment per frame). It returns one [tokens, hidden] tensor
            or a tuple/list of them (e.g. embeddings and DeepStack features), one dtype.
            With `config.split_frames`, the tower must take pieces: declare keyword parameters
            `pieces` and `exchange` (`tower(pv, grid, cu, *, pieces, exchange)`; others are
            refused with an error naming split_frames). Such a tower is always called with them:
            `pieces` a tuple of FramePiece (local frames of which this rank holds only rows
            [begin, end); such a frame has its own grid row (1, h, w), the WHOLE frame's
            geometry, and its cu_seqlens segment counts the piece's rows) and `exchange` None
            when the plan split nothing, else a callable. Contract, as frameshard's C++ towers
            keep it: positions (rotary ids, learned position tables, windows) come from the
            whole frame at the piece's rows; in every full-attention layer, in layer order, call
            `outs = exchange(rows)` exactly once -- EVERY rank, also one without pieces -- with
            rows = [local rows, F] (all local rows, e.g. torch.cat([k, v], 1) flattened over
            heads, in the tower's current row order); use outs[0] in place of rows (same values,
            tied to the collective so that its backward runs on every rank) and outs[1 + j], the
            whole frame's rows of pieces[j] (every holder's rows, in rank order), as the keys
            and values that piece's queries attend to. Layers that attend within windows of a
            piece, MLPs, norms and mergers stay local. The exchange is differentiable (its
            backward returns each row's gradient to the rank that sent it) and collective; it
            releases the GIL, is valid only during the call that received it, and a rank whose
            tower raises makes every peer's next exchange raise the same FrameshardError.
        pixel_values: the packed patch rows of every media item [sum(t*h*w), features], the same
            on every rank.
        grid_thw: [n, 3] (t, h, w) rows in patches, the same on every rank.
        group: the CP process group (Gloo or NCCL), a torch DeviceMesh (its "cp" dimension, or
            with mesh_dims ["dp", "cp"] its "dp" and "cp" dimensions), a frameshard.Mesh, or
            None: the default torch.distributed group.
        config: FrameShardingConfig; None means FrameShardingConfig(enabled=True). When the
            policy says replicated, the tower runs on everything (still collective: the ranks
            check that they agree).
        cp_size: the CP size the config is for; must equal the group's size (every rank raises
            otherwise). None: the group's size.
        spatial_merge_size, temporal_patch_size: the tower's geometry (Qwen-VL: 2 and 2).
        tower_trainable: whether the tower has trainable parameters (None: inferred for an
            nn.Module, else True).
        timeout: seconds (or timedelta) for the collectives; None: the group's default.
        return_plan: also return the Plan.
        token_owner: with config.gather == "owner", the CP rank that consumes each visual
            token (e.g. visual_token_owners from the sequence positions of the visual tokens);
            each rank then receives only its rows, in ascending token order, by one all-to-all
            whose backward returns every gradient row to the rank that encoded it.
        tower_dims: the sizes `cost_alpha: auto` counts (frameshard.tower_dims); None: read
            from `tower` when it is a transformers vision module, else the config's `tower`
            preset. The returned Plan's `cost_model` names the model used.
        mesh: a `Mesh` (mesh_dims [dp, cp]): balance the frames of every DP replica over the
            whole dp x cp mesh instead (leave `group` and `cp_size` unset; config.mesh_dims
            ["dp", "cp"] requires it). pixel_values / grid_thw are this rank's replica's, and
            token_owner maps the replica's tokens to its cp ranks. The Plan is the pooled one
            (every replica's media, replica-major, over dp * cp ranks).
        media_keys: with config.dedup, one id per grid_thw row (a data set's image hash or URL:
            str, bytes, int or a tuple of them) instead of hashing the pixel rows: rows with
            equal ids are the same media item (their frames pair up by index). The same on the
            cp ranks of a replica. None: each frame is keyed by a 128-bit hash of its pixel rows,
            dtype and shape, computed on their device (frameshard/runtime/frame_keys.h).

    Dedup (config.dedup): the plan covers each distinct frame once -- in the CP group, or with a
    mesh in every replica's batch together -- the towers see each distinct frame's rows once, and
    every use of a frame receives its rows (in the same gather or all-to-all). The backward sums
    the gradients of all uses of a frame before the tower's: exact for a deterministic tower (the
    transformers Qwen-VL, GLM-4V and RADIO towers have no dropout); a tower with dropout in
    training draws one mask per distinct frame instead of one per use. `Plan.dedup` counts the
    frames and the distinct ones; without repeats plan and outputs are those of dedup off.

    Returns:
        The gathered output [total_tokens, hidden] -- a tuple of them when the tower returns a
        sequence -- with autograd through the gather; and the Plan if `return_plan`. With a
        mesh: this replica's rows; a text-only replica gets [0, hidden] rows on the sharded path
        (put them in the loss, e.g. `loss + 0 * out.sum()`, so its backward joins) and None on
        the replicated path (no tower ran; nothing to backpropagate).

    Collective over `group`. A failure on any rank (bad grid, tower exception, mismatched plans)
    raises FrameshardError on every rank instead of hanging.
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
    options.spatial_merge_size = int(spatial_merge_size)
    options.temporal_patch_size = int(temporal_patch_size)
    options.tower_trainable = bool(_trainable(tower) if tower_trainable is None else tower_trainable)
    options.timeout_ms = millis(timeout)
    options.token_owner = [int(o) for o in token_owner] if token_owner is not None else []
    dims = tower_dims if tower_dims is not None else resolve_dims(tower)
    options.tower_dims = dims.as_dict() if dims is not None else None
    options.takes_pieces = takes_pieces(tower)
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
    result, plan = _run(tower, pixel_values, grid_tensor(grid_thw), pg, options, mesh is not None)
    # A caller of its own (frameshard.hf) names itself in `frameshard_log`: (key, what).
    key, what = getattr(tower, "frameshard_log", None) or (
        getattr(tower, "__code__", None) or id(tower),
        "shard_vision",
    )
    log_path(key, plan, what, config)
    return (result, plan) if return_plan else result


def _run(
    tower: Tower, pixel_values: torch.Tensor, grid: torch.Tensor, pg: dist.ProcessGroup, options: Any, on_mesh: bool
) -> tuple[TowerOutput | None, Plan]:
    """The extension's encode (or encode_mesh) with `tower` called back as the C++ core calls a
    tower: (outputs in the tower's own form, the plan)."""
    returned_sequence = [False]
    with_pieces = options.takes_pieces

    def call(
        pv: torch.Tensor,
        grid: torch.Tensor,
        cu: torch.Tensor,
        pieces: Sequence[tuple] = (),
        exchange: Exchange | None = None,
    ) -> list[torch.Tensor]:
        if with_pieces:
            out = tower(pv, grid, cu, pieces=tuple(FramePiece(*p) for p in pieces), exchange=exchange)
        else:
            out = tower(pv, grid, cu)
        if isinstance(out, torch.Tensor):
            return [out]
        returned_sequence[0] = True
        return list(out)

    encode = _C.encode_mesh if on_mesh else _C.encode
    returned = encode(call, pixel_values, grid, pg, options)
    outputs, plan_d, dedup, mesh = returned[0], returned[1], returned[5], returned[6]
    result: TowerOutput | None = None  # a text-only replica on the mesh's replicated path
    if outputs:
        result = tuple(outputs) if returned_sequence[0] else outputs[0]
    plan = plan_from_dict(plan_d)
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
    pixel_values: torch.Tensor, grid_thw: GridLike, *, spatial_merge_size: int = 2, temporal_patch_size: int = 2
) -> list[tuple[int, int]]:
    """The 128-bit content key (hi, lo) of every frame unit of `grid_thw` -- what config.dedup
    keys frames by: a hash of the unit's pixel rows (two independent 64-bit lanes, each mixing
    every element with its column and every row with its index in the frame), its dtype and its
    shape, computed with tensor ops on the pixels' device. Not collective."""
    return list(_C.frame_keys(pixel_values, grid_tensor(grid_thw), int(spatial_merge_size), int(temporal_patch_size)))


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
