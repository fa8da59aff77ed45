"""Where frameshard's collectives run: a process group, a torch DeviceMesh or a `Mesh`.

Every call that takes a group (shard_vision, hf.enable, hf.context_parallel, calibrate_exchange)
resolves it here, the same way on every rank and without communicating:

    pg, mesh = resolve(group_or_device_mesh, "hf.enable", mesh_dims=config.mesh_dims)

- None: torch's default group;
- a ProcessGroup: itself;
- a `frameshard.Mesh(group, dp, cp)`: its group, balanced over dp x cp;
- a DeviceMesh, by the config's `mesh_dims` (the seed's key names the mesh's dimensions):
  ["cp"] takes the mesh's "cp" dimension (or the only dimension of a 1-D mesh); ["dp", "cp"]
  takes those two dimensions, flattened replica-major (rank = dp index * cp + cp index).

A DeviceMesh without the named dimension, or a size that disagrees with an explicit cp_size, is
refused with a FrameshardError on every rank (each rank sees the same mesh).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any, Union

import torch.distributed as dist

from ._C import FrameshardError

Timeout = Union[None, float, datetime.timedelta]  # noqa: UP007  (an alias evaluated at import)


@dataclasses.dataclass(frozen=True)
class Mesh:
    """A data x context-parallel mesh for `shard_vision(..., mesh=...)` and `hf.enable(...,
    mesh=...)` (frame_sharding.mesh_dims [dp, cp]): the vision work of every DP replica's batch is
    balanced over all dp * cp ranks of `group`, and each rank gets its own replica's outputs back.
    A torch DeviceMesh with dimensions "dp" and "cp" may be passed instead, as the group.

    `group` spans the whole mesh, replica-major: rank = replica * cp + cp rank (torch's default
    group when None). Each rank passes ITS OWN replica's pixel_values and grid_thw (the cp ranks
    of a replica the same); a text-only replica passes [0, features] pixel_values and a [0, 3]
    grid_thw, and must still call (every rank joins every collective). Gradients: all-reduce the
    tower's gradients over this whole group (SUM, then divide by dp, as DDP / FSDP over dp x cp
    do): a rank encodes other replicas' frames, so a reduction over CP or DP alone is wrong."""

    group: dist.ProcessGroup | None
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


def kind(group: object) -> str:
    """How an error names a group: its type, not its repr (an address differs between ranks, and
    the same error must read the same on every rank)."""
    return "None" if group is None else "a " + type(group).__name__


def millis(timeout: Timeout) -> int:
    """A timeout in milliseconds for the extension (0: the group's own)."""
    if timeout is None:
        return 0
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    return max(1, int(round(float(timeout) * 1000)))


def default_group(fn: str) -> dist.ProcessGroup:
    """torch's default group; FrameshardError when torch.distributed is not initialized."""
    if not dist.is_available() or not dist.is_initialized():
        raise FrameshardError(
            "frameshard.%s: expected a process group or an initialized torch.distributed "
            "default group, got neither (call torch.distributed.init_process_group)" % fn
        )
    return dist.group.WORLD


def _device_mesh_type() -> type | None:
    if not dist.is_available():
        return None
    from torch.distributed.device_mesh import DeviceMesh  # noqa: PLC0415  (absent without torch.distributed)

    return DeviceMesh


def is_device_mesh(obj: object) -> bool:
    cls = _device_mesh_type()
    return cls is not None and isinstance(obj, cls)


def _names(mesh: Any) -> tuple[str, ...]:
    return tuple(mesh.mesh_dim_names or ())


def _describe_mesh(mesh: Any) -> str:
    names = _names(mesh)
    if names:
        dims = ", ".join("%s=%d" % (n, s) for n, s in zip(names, mesh.shape, strict=True))
    else:
        dims = "unnamed %s" % (tuple(mesh.shape),)
    return "a %d-D DeviceMesh (%s)" % (mesh.ndim, dims)


# (id of the DeviceMesh, its dims) -> the flattened dp x cp group (the mesh is kept alive with it).
_FLATTENED: dict[tuple[int, tuple[str, ...]], tuple[Any, dist.ProcessGroup]] = {}


def _flattened_group(mesh: Any, fn: str) -> dist.ProcessGroup:
    """One group over the "dp" and "cp" dimensions of `mesh`, replica-major."""
    key = (id(mesh), ("dp", "cp"))
    if key in _FLATTENED:
        return _FLATTENED[key][1]
    sub = mesh if _names(mesh) == ("dp", "cp") else mesh["dp", "cp"]
    ranks = [int(r) for r in sub.mesh.flatten().tolist()]
    if ranks != sorted(ranks):
        raise FrameshardError(
            "frameshard.%s: expected the DeviceMesh's (dp, cp) ranks ascending replica-major (rank = "
            "dp index * cp + cp index), got %s" % (fn, ranks)
        )
    if ranks == list(range(dist.get_world_size())):
        group = dist.group.WORLD  # the whole world in order: the default group is that group
    else:
        # DeviceMesh has no public flatten; _flatten is what torchtitan uses (collective over the
        # root mesh, which every rank of it calls alike, as here).
        group = sub._flatten("frameshard_dp_cp").get_group()
    _FLATTENED[key] = (mesh, group)
    return group


def _from_device_mesh(mesh: Any, fn: str, mesh_dims: Sequence[str]) -> tuple[dist.ProcessGroup, Mesh | None]:
    names = _names(mesh)
    if list(mesh_dims) == ["cp"]:
        if mesh.ndim == 1:
            return mesh.get_group(), None
        if "cp" in names:
            return mesh.get_group("cp"), None
        raise FrameshardError(
            "frameshard.%s: expected a 1-D DeviceMesh or one with a 'cp' dimension (mesh_dims [cp]), got %s"
            % (fn, _describe_mesh(mesh))
        )
    if "dp" not in names or "cp" not in names:
        raise FrameshardError(
            "frameshard.%s: expected a DeviceMesh with dimensions 'dp' and 'cp' (mesh_dims [dp, cp]), got %s"
            % (fn, _describe_mesh(mesh))
        )
    dp, cp = int(mesh.size(names.index("dp"))), int(mesh.size(names.index("cp")))
    return _flattened_group(mesh, fn), Mesh(None, dp, cp)


def resolve(
    group: Any,
    fn: str,
    *,
    mesh_dims: Sequence[str] = ("cp",),
    cp_size: int | None = None,
) -> tuple[dist.ProcessGroup, Mesh | None]:
    """(the process group, the dp x cp Mesh or None) of what the caller passed as its group (see
    the module docstring); `cp_size`, when given, must equal the resolved CP size."""
    mesh: Mesh | None = None
    if group is None:
        pg = default_group(fn)
    elif isinstance(group, Mesh):
        mesh = group
        pg = group.group if group.group is not None else default_group(fn)
    elif is_device_mesh(group):
        pg, mesh = _from_device_mesh(group, fn, mesh_dims)
        if mesh is not None:
            mesh = Mesh(pg, mesh.dp, mesh.cp)
    elif dist.is_available() and isinstance(group, dist.ProcessGroup):
        pg = group
    else:
        raise FrameshardError(
            "frameshard.%s: expected a torch.distributed ProcessGroup, a DeviceMesh, a "
            "frameshard.Mesh or None as the group, got %s" % (fn, kind(group))
        )
    if list(mesh_dims) == ["dp", "cp"] and mesh is None:
        raise FrameshardError(
            "frameshard.%s: expected a DeviceMesh with dimensions 'dp' and 'cp' or "
            "mesh=frameshard.Mesh(group, dp, cp) with mesh_dims [dp, cp], got %s" % (fn, kind(group))
        )
    size = mesh.cp if mesh is not None else pg.size()
    if cp_size is not None and int(cp_size) != size and is_device_mesh(group):
        raise FrameshardError(
            "frameshard.%s: expected cp_size equal to the DeviceMesh's cp size %d, got %r" % (fn, size, cp_size)
        )
    return pg, mesh
