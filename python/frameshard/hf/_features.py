"""The sharded call of families whose merge lives outside the vision module (Nemotron Omni,
PaddleOCR-VL: `Family.features`): `enable` replaces the model INSTANCE's `get_image_features`
with `sharded_image_features`, which runs the whole chain (vision encoder to projector) on this
rank's images only and gathers the projected features: one gather of post-projector rows
("project, then gather", as Megatron Bridge orders it for Nemotron Omni). The model's forward,
which calls get_image_features, is unchanged; `disable` restores it. On the sharded path the
output is the model's class with `pooler_output` (one tensor per image) only.

What is split: whole images (the plan's unit is one image; `plan_inputs` gives its cost). Ranks
without an image encode one zero 2 x 2 placeholder image (one output row, dropped; Megatron
Bridge's placeholder is a 1 x 1 image padded to even), and with `min_local_patch_rows` zero floor
images of the last image's grid; both pass through the whole chain, so every rank's parameters
join the backward.

Collective: every rank of the group calls get_image_features (the model's forward with images)
with the same pixel_values and grid. The dp x cp mesh is not supported for these families.
"""

from __future__ import annotations

from typing import Any

import torch

from .._C import FrameshardError
from .._config import FrameShardingConfig
from .._shard import TowerGeometry
from .._towers import TowerDims, tower_dims
from . import _patches
from ._family import Family
from ._vision import LocalCall, State, refuse_precomputed, sharded_call

MERGE = 2  # both families merge 2 x 2 patches into one token (transformers splits by h*w // 2**2)
GEOMETRY = TowerGeometry(spatial_merge_size=MERGE, temporal_patch_size=1)  # a unit is one image
OWNER = "features"  # the patch registry's owner of get_image_features


def _thw(grid_hw: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.ones_like(grid_hw[:, :1]), grid_hw], dim=1)


def _frames(local: torch.Tensor) -> torch.Tensor:
    """One (1, h, w) row per image: the floor images are one (count, h, w) row of a local grid."""
    hw = local[:, 1:].repeat_interleave(local[:, 0], dim=0)
    return _thw(hw)


def plan_inputs(
    model: torch.nn.Module, family: Family, config: FrameShardingConfig | None = None
) -> tuple[FrameShardingConfig, TowerDims]:
    """(config, tower dims) that `enable` plans the images of `model` (a model of `family`) with;
    `config=None` is FrameShardingConfig(enabled=True). The same plan, without communication:

        cfg, dims = frameshard.hf.plan_inputs(model, cfg)
        frameshard.plan(grid_thw, cp_size, cfg, tower=dims, temporal_patch_size=1)

    with grid_thw one (1, h, w) row per image. "auto" is the C++ FLOP model
    (include/frameshard/cost.h) of these dims: the vision config's, with the family's projector
    as the one merger (Features.dims)."""
    config = config if config is not None else FrameShardingConfig(enabled=True)
    return config, family.features_call.dims(model, tower_dims(model.config))


def _grid_of(family: Family, args: tuple, kwargs: dict) -> torch.Tensor:
    """The [n, 3] (t, h, w) grid of the images; refuses what the sharded path cannot honour. The
    inputs are the same on every rank (the collective's contract), so every rank raises alike."""
    call = family.features_call
    grid = args[0] if args else kwargs.pop(call.grid_key, None)
    refuse_precomputed(kwargs, "images")
    grid = torch.as_tensor(grid).to(device="cpu", dtype=torch.int64) if grid is not None else None
    if grid is None or grid.dim() != 2 or grid.shape[1] != call.grid_columns:
        raise FrameshardError(
            "frameshard.hf: expected %s of shape [images, %d], got %s"
            % (call.grid_key, call.grid_columns, "None" if grid is None else list(grid.shape))
        )
    grid = _thw(grid) if call.grid_columns == 2 else grid
    call.check(grid)
    return grid


class _LocalChain(LocalCall):
    """The class's get_image_features on this rank's images."""

    def __init__(self, model: torch.nn.Module, state: State, shape: tuple, kwargs: dict) -> None:
        super().__init__(model, state, kwargs)
        self.shape = shape  # of one patch: PaddleOCR-VL's pixel_values are [patches, C, p, p]

    def __call__(self, pv: torch.Tensor, local: torch.Tensor, _cu: torch.Tensor) -> torch.Tensor:
        local = _frames(local)
        grid_arg = local[:, 1:] if self.state.family.features_call.grid_columns == 2 else local
        original = type(self.module).get_image_features

        def run() -> Any:
            return original(self.module, pv.reshape(-1, *self.shape), grid_arg, return_dict=True, **self.kwargs)

        return self.record(run, lambda out: torch.cat(list(out.pooler_output)))


def sharded_image_features(model: torch.nn.Module, pixel_values: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """The model's get_image_features while enabled (bound to the instance; see enable)."""
    state: State = _patches.state(model, OWNER)
    grid = _grid_of(state.family, args, kwargs)
    return_dict = kwargs.pop("return_dict", None)
    chain = _LocalChain(model, state, tuple(pixel_values.shape[1:]), kwargs)
    parts = [m for m in state.family.features_call.parts(model) if m is not None]
    trainable = any(p.requires_grad for m in parts for p in m.parameters())
    pixel_rows = pixel_values.reshape(pixel_values.shape[0], -1)  # the plan takes rows
    rows, routed = sharded_call(chain, pixel_rows, grid, GEOMETRY, trainable=trainable, return_dict=return_dict)
    out = chain.last
    if routed:  # the gathered rows (one block per use) replace the chain's own
        sizes = (grid.prod(-1) // MERGE**2).tolist()
        out = type(out)(pooler_output=torch.split(rows, sizes))
    return out.to_tuple() if return_dict is False else out
