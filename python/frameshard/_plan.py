"""`plan`: the shard plan every rank computes from the same metadata, as Python objects."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Union

import torch

from . import _C
from ._config import FrameShardingConfig
from ._towers import resolve_dims

GridLike = Union[torch.Tensor, Sequence[Sequence[int]]]  # noqa: UP007  (evaluated at import)


@dataclasses.dataclass(frozen=True)
class FrameUnit:
    """One temporal patch row (frame) of one media item: the unit assigned to a rank."""

    media: int  # grid_thw row it comes from
    frame: int  # temporal index inside that media item
    h: int
    w: int
    patch_rows: int  # h * w rows of pixel_values
    tokens: int  # h * w / merge^2 output rows
    pixel_offset: int  # first row in the packed pixel_values
    token_offset: int  # first row in the full (replicated) output


@dataclasses.dataclass(frozen=True)
class RankPlan:
    """What one rank encodes: its units, the local grid/pixel rows/cu_seqlens fed to the tower
    (real frames, then floor-padding and dummy zero frames) and what it gathers."""

    rank: int
    units: list[int]
    grid: list[tuple[int, int, int]]
    pixel_ranges: list[tuple[int, int]]  # half-open rows of the global pixel_values
    cu_seqlens: list[int]
    real_patch_rows: int
    real_tokens: int  # rows this rank contributes to the gather
    pad_frames: int
    dummy_frames: int
    local_patch_rows: int  # rows fed to the tower
    local_tokens: int  # rows the tower returns
    cost: float
    # split plans: (local frame, begin, end) of each frame this rank holds only rows of
    pieces: list[tuple[int, int, int]]
    exchange_rows: int  # K/V rows received per full-attention layer


@dataclasses.dataclass(frozen=True)
class DedupCounts:
    """What `dedup` found (frame_sharding.dedup): the frame units, patch rows and merged tokens
    of the call (on a mesh: of every replica), and how many of them are distinct -- the ones the
    towers encoded, once each across the group (on the mesh's replicated path, where each replica
    encodes its own frames: each replica's distinct ones, summed)."""

    units: int
    distinct_units: int
    patch_rows: int
    distinct_patch_rows: int
    tokens: int
    distinct_tokens: int


@dataclasses.dataclass(frozen=True)
class MeshChoice:
    """What a call over the dp x cp mesh ran (mesh_dims ["dp", "cp"]): `mode` "mesh" (every
    replica's frames pooled over all ranks) or "cp-only" (each replica's frames over its own CP
    ranks). With policy "auto" both were predicted (`weighed`): `mesh_seconds` and
    `cp_only_seconds` (the slowest rank's tower plus its received bytes), `gain` = 1 - mesh /
    cp-only, and the mesh runs only when gain >= config.mesh_min_gain; `reason` says so."""

    mode: str
    weighed: bool
    gain: float
    reason: str
    mesh_seconds: float
    cp_only_seconds: float


@dataclasses.dataclass(frozen=True)
class Plan:
    """The shard plan (frameshard::ShardPlan): `path` is "sharded" or "replicated", `reason`
    says why; `cuts` are the world + 1 unit boundaries of a contiguous partition (empty for lpt);
    `gather_counts` the rows each rank contributes; `restore_rows` (empty when contiguous)
    maps the gathered rows back to the original order."""

    path: str
    reason: str
    world: int
    partitioner: str
    cost_model: str
    grid: list[tuple[int, int, int]]
    units: list[FrameUnit]
    unit_costs: list[float]
    cuts: list[int]
    assignment: list[int]
    rank_costs: list[float]
    ranks: list[RankPlan]
    gather_counts: list[int]
    restore_rows: list[int]
    total_patch_rows: int
    total_tokens: int
    split: bool  # some frame is cut across ranks (split_frames)
    unsplit_max_cost: float  # the optimal max rank cost without cutting frames
    fingerprint: str
    # With dedup: the plan covers the distinct frames only (grid, units, ranks); these count
    # the call's frames and the distinct ones. None without dedup.
    dedup: DedupCounts | None = None
    # On the dp x cp mesh: which plan ran and why. None off the mesh.
    mesh: MeshChoice | None = None

    @property
    def sharded(self) -> bool:
        return self.path == "sharded"

    @property
    def imbalance(self) -> float:
        """Largest rank cost over the mean (1.0 is perfect)."""
        total = sum(self.rank_costs)
        if not self.rank_costs or total == 0:
            return 1.0
        return max(self.rank_costs) / (total / len(self.rank_costs))


def plan_from_dict(d: dict[str, Any]) -> Plan:
    """A Plan from the dict the extension returns."""
    fields = dict(d)
    fields["grid"] = [tuple(g) for g in d["grid"]]
    fields["units"] = [FrameUnit(**u) for u in d["units"]]
    ranks = []
    for r in d["ranks"]:
        r = dict(r)
        r["grid"] = [tuple(g) for g in r["grid"]]
        r["pixel_ranges"] = [tuple(x) for x in r["pixel_ranges"]]
        r["pieces"] = [tuple(x) for x in r["pieces"]]
        ranks.append(RankPlan(**r))
    fields["ranks"] = ranks
    return Plan(**fields)


def grid_tensor(grid_thw: GridLike) -> torch.Tensor:
    """grid_thw as an int64 [n, 3] tensor (kept on its device)."""
    if isinstance(grid_thw, torch.Tensor):
        return grid_thw.to(torch.int64)
    return torch.tensor([list(g) for g in grid_thw], dtype=torch.int64).reshape(-1, 3)


def plan(
    grid_thw: GridLike,
    cp_size: int,
    config: FrameShardingConfig | None = None,
    *,
    spatial_merge_size: int = 2,
    temporal_patch_size: int = 2,
    tower: Any = None,
) -> Plan:
    """The shard plan of `grid_thw` ([n, 3] rows (t, h, w) in patches) over `cp_size` ranks.

    Pure: no communication; every rank gets the same plan from the same arguments.
    `config=None` is `FrameShardingConfig(enabled=True)` (the schema's thresholds apply).
    `tower`: the tower that will run -- TowerDims, a transformers vision module or its config
    (frameshard.tower_dims) -- whose FLOPs `cost_alpha: auto` counts; None costs the config's
    `tower` preset. `Plan.cost_model` says which model was used.
    Raises FrameshardError for a bad grid or config."""
    config = config if config is not None else FrameShardingConfig(enabled=True)
    dims = resolve_dims(tower)
    if tower is not None and dims is None:
        raise _C.FrameshardError(
            "frameshard.plan: expected tower to be TowerDims, a transformers vision module or "
            "its config, got %s" % type(tower).__name__
        )
    d = _C.plan(
        grid_tensor(grid_thw).cpu(),
        config.overrides(),
        int(cp_size),
        int(spatial_merge_size),
        int(temporal_patch_size),
        dims.as_dict() if dims is not None else None,
    )
    return plan_from_dict(d)


def workload(name: str, seed: int = 0, scale: int = 1) -> list[tuple[int, int, int]]:
    """The grid_thw rows of a workload: a seeded preset of the C++ core ("doc", "multi",
    "video", "mixed", "grpo"; frameshard/workload.h, the same batches `frameshard plan --preset` and
    the A/B use) or a workload JSON file, every frame's h and w scaled down by `scale` (>= 1) so
    a CPU can run it. Pure."""
    grid, _merge, _temporal = _C.workload(str(name), int(seed), int(scale))
    return [tuple(g) for g in grid]
