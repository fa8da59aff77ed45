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
import datetime
import inspect
from typing import Callable, NamedTuple, Optional, Sequence, Union

import torch
import torch.distributed as dist

from . import _C
from ._C import FrameshardError
from .config import FrameShardingConfig
from .plan import GridLike, Plan, grid_tensor, plan_from_dict
from .towers import TowerDims, resolve_dims

TowerOutput = Union[torch.Tensor, Sequence[torch.Tensor]]
Tower = Callable[..., TowerOutput]
Timeout = Union[None, float, datetime.timedelta]
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


def resolve_group(group: Optional[dist.ProcessGroup], fn: str) -> dist.ProcessGroup:
    """`group`, or the default torch.distributed group when None."""
    if group is not None:
        return group
    if not dist.is_available() or not dist.is_initialized():
        raise FrameshardError(
            "frameshard.%s: expected a process group or an initialized torch.distributed "
            "default group, got neither (call torch.distributed.init_process_group)" % fn
        )
    return dist.distributed_c10d._get_default_group()


def _kind(group: object) -> str:
    """How an error names a group: its type, not its repr (an address differs between ranks, and
    the same error must read the same on every rank)."""
    return "None" if group is None else "a " + type(group).__name__


@dataclasses.dataclass(frozen=True)
class Mesh:
    """A data x context-parallel mesh for `shard_vision(..., mesh=...)` and `hf.enable(...,
    mesh=...)` (frame_sharding.mesh_dims [dp, cp]): the vision work of every DP replica's batch is
    balanced over all dp * cp ranks of `group`, and each rank gets its own replica's outputs back.

    `group` spans the whole mesh, replica-major: rank = replica * cp + cp rank (torch's default
    group when None). Each rank passes ITS OWN replica's pixel_values and grid_thw (the cp ranks
    of a replica the same); a text-only replica passes [0, features] pixel_values and a [0, 3]
    grid_thw, and must still call (every rank joins every collective). Gradients: all-reduce the
    tower's gradients over this whole group (SUM, then divide by dp, as DDP / FSDP over dp x cp
    do): a rank encodes other replicas' frames, so a reduction over CP or DP alone is wrong."""

    group: Optional[dist.ProcessGroup]
    dp: int
    cp: int

    def __post_init__(self) -> None:
        for name in ("dp", "cp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise FrameshardError("frameshard.Mesh: expected %s a positive integer, got %r" % (name, v))

    def replica(self, rank: int) -> int:
        """The DP replica of mesh rank `rank`."""
        return rank // self.cp

    def cp_rank(self, rank: int) -> int:
        """The CP rank (0 .. cp-1) of mesh rank `rank` within its replica."""
        return rank % self.cp


def _millis(timeout: Timeout) -> int:
    if timeout is None:
        return 0
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    return max(1, int(round(float(timeout) * 1000)))


def all_gather_rows(
    tensor: torch.Tensor,
    counts: Optional[Sequence[int]] = None,
    group: Optional[dist.ProcessGroup] = None,
    *,
    timeout: Timeout = None,
) -> torch.Tensor:
    """Differentiable variable-size all-gather along dim 0.

    Rank r passes `tensor` with counts[r] rows; every rank returns the concatenation over ranks in
    rank order. Backward: rank r gets the SUM over ranks of the gradient of its rows (a
    reduce-scatter-v), so with the usual gradient all-reduce the result equals the replicated path.
    `counts=None` exchanges the counts first. Collective; any dtype; a rank may send 0 rows.
    """
    pg = resolve_group(group, "all_gather_rows")
    return _C.all_gather_rows(tensor, [int(c) for c in (counts or [])], pg, _millis(timeout))


def _trainable(tower: object) -> bool:
    if isinstance(tower, torch.nn.Module):
        return any(p.requires_grad for p in tower.parameters())
    return True


def shard_vision(
    tower: Tower,
    pixel_values: torch.Tensor,
    grid_thw: GridLike,
    group: Optional[dist.ProcessGroup] = None,
    config: Optional[FrameShardingConfig] = None,
    *,
    cp_size: Optional[int] = None,
    spatial_merge_size: int = 2,
    temporal_patch_size: int = 2,
    tower_trainable: Optional[bool] = None,
    timeout: Timeout = None,
    return_plan: bool = False,
    token_owner: Optional[Sequence[int]] = None,
    tower_dims: Optional[TowerDims] = None,
    mesh: Optional[Mesh] = None,
) -> Union[Optional[TowerOutput], tuple[Optional[TowerOutput], Plan]]:
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
        group: the CP process group (Gloo or NCCL); None: the default torch.distributed group.
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
            "names its group, dp and cp), got group=%s cp_size=%r" % (_kind(group), cp_size)
        )
    if mesh is None and list(config.mesh_dims) == ["dp", "cp"]:
        raise FrameshardError(
            "frameshard.shard_vision: expected mesh=frameshard.Mesh(group, dp, cp) with "
            "mesh_dims [dp, cp], got no mesh"
        )
    pg = resolve_group(mesh.group if mesh is not None else group, "shard_vision")
    if (config.gather == "owner") != (token_owner is not None):
        raise FrameshardError(
            "frameshard.shard_vision: expected token_owner exactly when config.gather is "
            "'owner', got gather=%r and token_owner %s"
            % (config.gather, "given" if token_owner is not None else "None")
        )
    dims = tower_dims if tower_dims is not None else resolve_dims(tower)
    returned_sequence = [False]
    with_pieces = takes_pieces(tower)

    def call(
        pv: torch.Tensor,
        grid: torch.Tensor,
        cu: torch.Tensor,
        pieces: Sequence[tuple] = (),
        exchange: Optional[Exchange] = None,
    ) -> list[torch.Tensor]:
        if with_pieces:
            out = tower(pv, grid, cu, pieces=tuple(FramePiece(*p) for p in pieces), exchange=exchange)
        else:
            out = tower(pv, grid, cu)
        if isinstance(out, torch.Tensor):
            return [out]
        returned_sequence[0] = True
        return list(out)

    common = (
        int(spatial_merge_size),
        int(temporal_patch_size),
        bool(_trainable(tower) if tower_trainable is None else tower_trainable),
        _millis(timeout),
        [int(o) for o in token_owner] if token_owner is not None else [],
        dims.as_dict() if dims is not None else None,
        with_pieces,
    )
    if mesh is not None:
        outputs, plan_d = _C.encode_mesh(
            call, pixel_values, grid_tensor(grid_thw), pg, config.overrides(), mesh.dp, mesh.cp, *common
        )[:2]
    else:
        outputs, plan_d = _C.encode(
            call,
            pixel_values,
            grid_tensor(grid_thw),
            pg,
            config.overrides(),
            int(cp_size if cp_size is not None else pg.size()),
            *common,
        )[:2]
    result: Optional[TowerOutput] = None  # a text-only replica on the mesh's replicated path
    if outputs:
        result = tuple(outputs) if returned_sequence[0] else outputs[0]
    if return_plan:
        return result, plan_from_dict(plan_d)
    return result


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
