"""Families whose merge lives outside the vision module: `frameshard.hf.enable` shards them at the
model's `get_image_features`, vision encoder to projector, per image.

    frameshard.hf.enable(model, group, frameshard.FrameShardingConfig(enabled=True))
    model(**batch)  # get_image_features: each rank encodes only its images

Two such families (transformers 5.24.0 checked), recognised by class (a subclass counts):

- Nemotron Omni (`nemotron_h_omni`: NemotronH_Omni_Reasoning_V3, `get_image_features(pixel_values,
  image_grid_hw)`): the RADIO vision model (`RadioModel`, packed patches, cls and register prefix
  tokens per image, attention within each image), the optional final LayerNorm, a 2 x 2 pixel
  shuffle of each image's (h, w) feature grid and the multi_modal_projector.
- PaddleOCR-VL (`paddleocr_vl`: PaddleOCRVLModel, `.model` of PaddleOCRVLForConditionalGeneration,
  `get_image_features(pixel_values, image_grid_thw)`): the SigLIP-style `PaddleOCRVisionModel`
  (per-image attention and position-table interpolation, per-patch output) and the `projector`
  (per image: norm, 2 x 2 merge, MLP).

Every step is per image, so `enable` replaces `get_image_features` on the model instance with
one that runs all of it on this rank's images only and gathers the projected features: one
gather, of post-projector rows (h * w / 4 per image), as Megatron Bridge's vision_dp_over_cp
orders it for Nemotron Omni ("project, then gather"). The model's forward, which calls
get_image_features, is unchanged; `disable` deletes the instance attribute. On the sharded path
the output is the model's class with `pooler_output` (one tensor per image) only.

What is split: whole images (the plan's unit is one image; its cost: `plan_inputs`).
Ranks without an image encode one zero 2 x 2 placeholder image (one output row, dropped; Megatron
Bridge's placeholder is a 1 x 1 image padded to even), and with `min_local_patch_rows` zero floor
images of the last image's grid; both pass through the whole chain, so every rank's parameters
join the backward.

What is not split: Nemotron Omni's videos. `get_video_features` runs RADIO densely on equal-size
tubelets (`[videos * tubelets, T * C, H, W]`), and the forward's Efficient Video Sampling compares
each tubelet with the previous one after the projector; the video call is left as transformers
runs it (every rank encodes every tubelet). Nemotron grids with an odd side are refused:
transformers' pixel shuffle needs even sides (its image processor makes every grid a multiple of
2; an odd one fails in a view), where Megatron Bridge zero-pads them; the sharded path keeps
transformers' semantics. PaddleOCR-VL has no video path.

Collective: every rank of the group calls get_image_features (the model's forward with images)
with the same pixel_values and grid. The mesh (`mesh=`) is not supported for these families.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist

from ._C import FrameshardError
from .config import FrameShardingConfig
from .hf import _STATE, _reraise, _skipped_by_compile, transformers_class_entry, unwrap_module
from .shard import Mesh, Timeout, resolve_group, shard_vision
from .towers import TowerDims, tower_dims

MERGE = 2  # both families merge 2 x 2 patches into one token (transformers splits by h*w // 2**2)


def _thw(grid_hw: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.ones_like(grid_hw[:, :1]), grid_hw], dim=1)


def _frames(local: torch.Tensor) -> torch.Tensor:
    """One (1, h, w) row per image: the floor images are one (count, h, w) row of a local grid."""
    hw = local[:, 1:].repeat_interleave(local[:, 0], dim=0)
    return _thw(hw)


def _check_even(grid: torch.Tensor) -> None:
    odd = [i for i, (_, h, w) in enumerate(grid.tolist()) if h % 2 or w % 2]
    if odd:
        raise FrameshardError(
            "frameshard.hf: expected even image_grid_hw sides (Nemotron Omni's 2 x 2 pixel shuffle; "
            "transformers' image processor makes every grid even and its model does not pad), got "
            "%s at image %d" % (grid[odd[0], 1:].tolist(), odd[0])
        )


def _omni_ratio(model: torch.nn.Module) -> None:
    ratio = float(model.config.downsample_ratio)
    if ratio != 0.5:
        raise FrameshardError(
            "frameshard.hf.enable: expected a Nemotron Omni config with downsample_ratio 0.5 (a 2 x 2 "
            "pixel shuffle, as transformers' get_image_features assumes), got %r" % ratio
        )


@dataclasses.dataclass(frozen=True)
class _Family:
    name: str
    grid_key: str  # the grid argument of get_image_features
    grid_columns: int  # 2: (h, w) rows; 3: (t, h, w) rows
    parts: Callable[[Any], list]  # the modules get_image_features runs (trainable or not)
    check: Callable[[torch.Tensor], None] = lambda grid: None
    validate: Callable[[Any], None] = lambda model: None


FAMILIES = {
    "NemotronH_Omni_Reasoning_V3": _Family(
        "nemotron_h_omni",
        "image_grid_hw",
        2,
        lambda m: [m.vision_model, m.vision_final_layernorm, m.multi_modal_projector],
        _check_even,
        _omni_ratio,
    ),
    "PaddleOCRVLModel": _Family("paddleocr_vl", "image_grid_thw", 3, lambda m: [m.visual, m.projector]),
}


def features_model(model: Any) -> Optional[tuple[torch.nn.Module, _Family]]:
    """(the module whose get_image_features is sharded, its family) when `model`, unwrapped, is
    or holds (at `.model`) a model of FAMILIES, else None."""
    root = unwrap_module(model)
    for candidate in (root, getattr(root, "model", None)):
        family = transformers_class_entry(candidate, FAMILIES) if candidate is not None else None
        if family is not None:
            return candidate, family
    return None


@dataclasses.dataclass
class _State:
    group: dist.ProcessGroup
    config: FrameShardingConfig  # as plan_inputs gives it
    cp_size: Optional[int]
    timeout: Timeout
    dims: TowerDims
    family: _Family


def plan_inputs(
    model: torch.nn.Module, config: Optional[FrameShardingConfig] = None
) -> tuple[FrameShardingConfig, TowerDims]:
    """(config, tower dims) that `enable` plans the images of `model` (a model of FAMILIES) with;
    `config=None` is FrameShardingConfig(enabled=True). The same plan, without communication:

        cfg, dims = frameshard.hf_families.plan_inputs(model, cfg)
        frameshard.plan(grid_thw, cp_size, cfg, tower=dims, temporal_patch_size=1)

    with grid_thw one (1, h, w) row per image. Both families' "auto" is the C++ FLOP model
    (include/frameshard/cost.h) of these dims. Nemotron Omni: RADIO's blocks on p + P tokens
    (P = num_cls_tokens + num_registers prefix tokens, tower_dims), the projector after the
    2 x 2 pixel shuffle as the one merger (4d -> projector_hidden_size -> out on the p / 4
    shuffled tokens; its RMSNorm not counted), as the C++ radio tower costs it. PaddleOCR-VL: the
    dims of its blocks with the projector as the one merger (norm, then linear 4d -> 4d and
    4d -> out on the merged tokens: exactly the merger cost.h counts, d (d m^2 + o)
    multiply-adds per patch)."""
    found = features_model(model)
    if found is None:
        raise FrameshardError(
            "frameshard.hf_families.plan_inputs: expected a transformers %s model, got %s"
            % (" or ".join(f.name for f in FAMILIES.values()), type(model).__name__)
        )
    model, family = found
    config = config if config is not None else FrameShardingConfig(enabled=True)
    dims = tower_dims(model.config)
    if family.name == "nemotron_h_omni":
        proj = model.multi_modal_projector
        dims = dataclasses.replace(
            dims,
            mergers=1,
            merge_size=MERGE,
            merger_hidden=int(proj.linear_1.out_features),
            out_hidden=int(proj.linear_2.out_features),
        )
    if family.name == "paddleocr_vl":
        out = int(model.projector.linear_2.out_features)
        dims = dataclasses.replace(dims, mergers=1, merge_size=MERGE, out_hidden=out)
    return config, dims


def enable(
    model: torch.nn.Module,
    family: _Family,
    group: Optional[dist.ProcessGroup],
    config: Optional[FrameShardingConfig],
    *,
    cp_size: Optional[int] = None,
    timeout: Timeout = None,
    mesh: Optional[Mesh] = None,
) -> torch.nn.Module:
    """frameshard.hf.enable for a model of FAMILIES (unwrapped; see features_model): shards its
    get_image_features over `group` (see the module docstring). Returns that model."""
    if mesh is not None:
        raise FrameshardError(
            "frameshard.hf.enable: expected mesh=None for a %s model (its images are sharded over "
            "one CP group), got a Mesh" % family.name
        )
    family.validate(model)
    config, dims = plan_inputs(model, config)
    state = _State(
        group=resolve_group(group, "hf.enable"),
        config=config,
        cp_size=cp_size,
        timeout=timeout,
        dims=dims,
        family=family,
    )
    setattr(model, _STATE, state)
    model.get_image_features = types.MethodType(_skipped_by_compile(_sharded_image_features), model)
    return model


def disable(model: torch.nn.Module) -> bool:
    """Restores get_image_features; False if it was not enabled."""
    if not hasattr(model, _STATE):
        return False
    del model.get_image_features  # the instance attribute: the class's method shows again
    delattr(model, _STATE)
    return True


def _grid_of(family: _Family, args: tuple, kwargs: dict) -> torch.Tensor:
    """The [n, 3] (t, h, w) grid of the images; refuses what the sharded path cannot honour. The
    inputs are the same on every rank (the collective's contract), so every rank raises alike."""
    grid = args[0] if args else kwargs.pop(family.grid_key, None)
    precomputed = sorted(k for k, v in kwargs.items() if isinstance(v, torch.Tensor))
    if precomputed:
        raise FrameshardError(
            "frameshard.hf: expected no precomputed vision tensors (they describe the whole "
            "batch; each rank encodes only its images), got %s" % ", ".join(precomputed)
        )
    grid = torch.as_tensor(grid).to(device="cpu", dtype=torch.int64) if grid is not None else None
    if grid is None or grid.dim() != 2 or grid.shape[1] != family.grid_columns:
        raise FrameshardError(
            "frameshard.hf: expected %s of shape [images, %d], got %s"
            % (family.grid_key, family.grid_columns, "None" if grid is None else list(grid.shape))
        )
    grid = _thw(grid) if family.grid_columns == 2 else grid
    family.check(grid)
    return grid


def _sharded_image_features(
    model: torch.nn.Module, pixel_values: torch.Tensor, *args: Any, **kwargs: Any
) -> Any:
    """The model's get_image_features while enabled (bound to the instance; see enable)."""
    state: _State = getattr(model, _STATE)
    grid = _grid_of(state.family, args, kwargs)
    return_dict = kwargs.pop("return_dict", None)
    original = type(model).get_image_features
    shape = tuple(pixel_values.shape[1:])  # PaddleOCR-VL: [patches, C, p, p]; the plan takes rows
    last: list[Any] = [None]
    raised: list[Optional[BaseException]] = [None]

    def tower(pv: torch.Tensor, local: torch.Tensor, _cu: torch.Tensor) -> torch.Tensor:
        local = _frames(local)
        grid_arg = local[:, 1:] if state.family.grid_columns == 2 else local
        try:
            out = original(model, pv.reshape(-1, *shape), grid_arg, return_dict=True, **kwargs)
        except BaseException as e:
            raised[0] = e
            raise
        last[0] = out
        return torch.cat(list(out.pooler_output))

    parts = [m for m in state.family.parts(model) if m is not None]
    try:
        rows, plan = _skipped_by_compile(shard_vision)(
            tower,
            pixel_values.reshape(pixel_values.shape[0], -1),
            grid,
            state.group,
            state.config,
            cp_size=state.cp_size,
            spatial_merge_size=MERGE,
            temporal_patch_size=1,
            tower_trainable=any(p.requires_grad for m in parts for p in m.parameters()),
            timeout=state.timeout,
            return_plan=True,
            tower_dims=state.dims,
        )
    except FrameshardError as e:
        _reraise(e, raised[0])
    out = last[0]
    if plan.sharded:
        if return_dict is False:
            raise FrameshardError(
                "frameshard.hf: expected return_dict=True or unset on the sharded path (the sharded "
                "output has no last_hidden_state), got return_dict=False"
            )
        sizes = (grid.prod(-1) // MERGE**2).tolist()
        out = type(out)(pooler_output=torch.split(rows, sizes))
    return out.to_tuple() if return_dict is False else out
