"""Hugging Face adapters: one line gives a transformers Qwen-VL model sharded vision.

    frameshard.hf.enable(model, group, frameshard.FrameShardingConfig(enabled=True))
    ...  # get_image_features / get_video_features, model(...), loss.backward() as before
    frameshard.hf.disable(model)

`enable` replaces the forward of the model's vision module (an attribute on that instance; the
class is untouched) with one that runs the original forward on this rank's frames only, through
`frameshard.shard_vision`, and returns the same output class with the gathered `pooler_output`
(the merged embeddings) and, for Qwen3-VL, the gathered `deepstack_features`. Per-patch fields
(`last_hidden_state`, `hidden_states`, `attentions`) would be rank-local and are None on the
sharded path; on the replicated path (policy below its thresholds) the original output is
returned unchanged. `disable` deletes the instance attribute, restoring the class's forward.

Supported vision modules (transformers 5.24.0 checked; see docs/python.md): Qwen2-VL,
Qwen2.5-VL, Qwen3-VL (DeepStack), Qwen3.5, the Qwen3-VL-MoE / Qwen3.5-MoE vision modules (the
same module code) and GLM-4.1V / GLM-4.5V (Glm4vVisionModel, Glm4vMoeVisionModel: per-frame
attention, position embedding, downsample and merger inside the module; given one (1, h, w) grid
row per frame, see `tower_grid`), recognised by their class hierarchy, so a subclass or FSDP2's
generated `FSDP<Class>` counts. Nemotron Omni (NemotronH_Omni_Reasoning_V3) and PaddleOCR-VL
(PaddleOCRVLModel) merge outside their vision module: they are sharded per image at
get_image_features instead, encoder to projector (frameshard.hf_families). The model may be
held however a trainer holds it: `enable`, `disable` and `is_enabled` see through torch.compile
(`_orig_mod`), DistributedDataParallel and FSDP1 (`.module`), checkpoint_wrapper
(`_checkpoint_wrapped_module`) and PEFT (`get_base_model()`), at the top or at `.visual` /
`.model.visual`, however nested; FSDP2's `fully_shard` may come before or after `enable`.
Anything else raises FrameshardError naming what was found and what to pass.

Training (tests/python/test_wrappers.py): outputs and summed gradients equal the replicated
model's with HF gradient checkpointing, torch.utils.checkpoint around the vision module
(reentrant or not; a non-reentrant recomputation reruns the sharded forward, collectives
included, and its early stop passes through), autocast and bf16 / fp16 parameters, a frozen tower
(no autograd through the gather, so no backward collective), no_grad / inference_mode, and
several vision calls per step. Under torch.compile the sharded forward's own frame is skipped
(a graph break) and the tower it calls back is compiled (see `_skipped_by_compile`).

Split frames (`split_frames: true`; frameshard.hf_split): every family above except Nemotron Omni
and PaddleOCR-VL (whole images) also runs pieces of large frames on several ranks; `enable` then
patches, on the instance, the attention of the full-attention blocks (one K/V exchange per layer)
and passes the whole frame's positions at each piece's rows; `disable` restores both.

Cost: the plan costs the wrapped tower itself (frameshard.tower_dims of its config) when
`cost_alpha` is "auto" or "automodel"; `Plan.cost_model` names the dimensions.

The forward calls are collective over the group: every rank must run the vision module on the
same pixel_values and grid_thw (as CP ranks of one microbatch do).

With `mesh=frameshard.Mesh(world, dp, cp)` (mesh_dims [dp, cp]) each rank runs the vision module
on its own DP replica's pixel_values and grid_thw, the frames of all replicas are balanced over
the dp x cp ranks and each gets its replica's features back. Every rank must make the same number
of vision calls per step: where a replica's batch has no media (transformers then skips the
vision module), add `frameshard.hf.join_without_media(model)` to its loss once per vision call
the others make (it joins the collectives, forward and backward). All-reduce the gradients over
the whole mesh (DDP / FSDP over dp x cp).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
from typing import Any, Callable, NoReturn, Optional

import torch
import torch.distributed as dist

from . import hf_split
from ._C import FrameshardError
from .config import FrameShardingConfig
from .shard import Mesh, Timeout, _kind, resolve_group, shard_vision
from .towers import TowerDims, tower_dims

# Vision module class name -> family.
SUPPORTED_VISION_MODULES = {
    "Qwen2VisionTransformerPretrainedModel": "qwen2_vl",
    "Qwen2_5_VisionTransformerPretrainedModel": "qwen2_5_vl",
    "Qwen3VLVisionModel": "qwen3_vl",
    "Qwen3VLMoeVisionModel": "qwen3_vl_moe",
    "Qwen3_5VisionModel": "qwen3_5",
    "Qwen3_5MoeVisionModel": "qwen3_5_moe",
    "Glm4vVisionModel": "glm4v",
    "Glm4vMoeVisionModel": "glm4v_moe",
}

# Families whose vision module takes one frame per grid row: GLM-4V's position embedding
# (Glm4vVisionEmbeddings) looks each frame's (h, w) up by frame index in grid_thw, so a
# (t > 1, h, w) row raises IndexError (transformers 5.24; its get_video_features passes one
# (1, h, w) row per frame). frameshard's local grid has such a row: the floor frames.
_ONE_ROW_PER_FRAME = ("glm4v", "glm4v_moe")

_STATE = "_frameshard_state"


@dataclasses.dataclass
class _State:
    group: Optional[dist.ProcessGroup]  # None with a mesh (it names its group)
    config: FrameShardingConfig
    cp_size: Optional[int]
    timeout: Timeout
    family: str
    dims: Optional[TowerDims]
    mesh: Optional[Mesh] = None


def _wrapped_module(module: Any) -> Any:
    """The module a training wrapper holds, or None when `module` is none of: torch.compile's
    OptimizedModule (`_orig_mod`), checkpoint_wrapper (`_checkpoint_wrapped_module`),
    DistributedDataParallel and FSDP1 (`.module`), a PEFT model (`get_base_model()`) or tuner
    (`.model`). A wrapper's package is imported when an instance of it exists, so only imported
    ones are checked (importing torch.distributed.fsdp or peft here would cost seconds)."""
    if isinstance(module, torch.nn.Module):
        for name in ("_orig_mod", "_checkpoint_wrapped_module"):
            if name in module._modules:
                return module._modules[name]
        if isinstance(module, torch.nn.parallel.DistributedDataParallel):
            return module.module
        fsdp = sys.modules.get("torch.distributed.fsdp")
        if fsdp is not None and isinstance(module, fsdp.FullyShardedDataParallel):
            return module.module
    peft = sys.modules.get("peft")
    if peft is not None and hasattr(module, "peft_config"):
        if callable(getattr(module, "get_base_model", None)):
            return module.get_base_model()  # PeftModel / PeftMixedModel -> the transformers model
        if isinstance(module, peft.tuners.tuners_utils.BaseTuner):
            return module.model  # LoraModel and the like (PeftModel.base_model)
    return None


def unwrap_module(module: Any) -> Any:
    """`module` without its training wrappers (torch.compile, DDP, FSDP1, checkpoint_wrapper,
    PEFT), however nested. FSDP2's `fully_shard` and `replicate` keep the instance (they only
    derive its class): unchanged."""
    seen: set[int] = set()
    while id(module) not in seen:
        seen.add(id(module))
        inner = _wrapped_module(module)
        if inner is None:
            break
        module = inner
    return module


def family_of(module: Any) -> Optional[str]:
    """The supported family of a vision module, from its class hierarchy (so a subclass and
    FSDP2's generated FSDP<Class> count), or None."""
    return transformers_class_entry(module, SUPPORTED_VISION_MODULES)


def transformers_class_entry(module: Any, table: dict) -> Any:
    """`table[name]` for the first class in `module`'s class hierarchy that is a transformers
    class named in `table` (so a subclass and FSDP2's generated FSDP<Class> count), or None."""
    for cls in type(module).__mro__:
        entry = table.get(cls.__name__)
        if entry is not None and cls.__module__.startswith("transformers."):
            return entry
    return None


def tower_grid(family: Optional[str], grid: torch.Tensor) -> torch.Tensor:
    """`grid` ([n, 3] t, h, w) as the vision module of `family` takes it: unchanged, or for GLM-4V
    one (1, h, w) row per frame (the same frames, the same per-frame encoding)."""
    if family not in _ONE_ROW_PER_FRAME or not bool((grid[:, 0] > 1).any()):
        return grid
    hw = grid[:, 1:].repeat_interleave(grid[:, 0], dim=0)
    return torch.cat([torch.ones_like(hw[:, :1]), hw], dim=1)


def _describe(module: Any) -> str:
    """ "DistributedDataParallel wrapping Qwen2VLForConditionalGeneration" and the like."""
    names = [type(module).__name__]
    inner = unwrap_module(module)
    if inner is not module:
        names.append(type(inner).__name__)
    return " wrapping ".join(names)


def _features_model(model: Any) -> Any:
    """(model, family) when `model` is a Nemotron Omni or PaddleOCR-VL model, whose
    get_image_features frameshard.hf_families shards, else None."""
    from . import hf_families  # noqa: PLC0415  (it imports this module)

    return hf_families.features_model(model)


def find_vision_module(model: Any, *, fn: str = "find_vision_module") -> torch.nn.Module:
    """The supported vision module of `model` (a ...ForConditionalGeneration, its `.model`, the
    vision module itself, or any of them wrapped by torch.compile, DDP, FSDP1/2,
    checkpoint_wrapper or PEFT), unwrapped; FrameshardError (naming `fn`) when there is none."""
    root = unwrap_module(model)
    candidates = [root, getattr(root, "visual", None)]
    inner = getattr(root, "model", None)
    if inner is not None:
        candidates.append(getattr(inner, "visual", None))
    for c in candidates:
        if c is not None and family_of(unwrap_module(c)) is not None:
            return unwrap_module(c)
    found = [_describe(c) for c in candidates[1:] if c is not None]
    from .hf_families import FAMILIES  # noqa: PLC0415

    raise FrameshardError(
        "frameshard.hf.%s: expected a transformers Qwen2-VL, Qwen2.5-VL, Qwen3-VL(-MoE), "
        "Qwen3.5(-MoE) or GLM-4V(-MoE) model or its vision module, or a Nemotron Omni or "
        "PaddleOCR-VL model (a subclass of %s; torch.compile, DDP, FSDP, checkpoint_wrapper and "
        "PEFT wrappers are seen through), got %s%s; pass the model or its vision module (for "
        "another wrapper, the model it wraps; for Nemotron Omni and PaddleOCR-VL the model)"
        % (
            fn,
            ", ".join(list(SUPPORTED_VISION_MODULES) + list(FAMILIES)),
            _describe(model),
            " with vision module %s" % found[0] if found else " (no .visual or .model.visual)",
        )
    )


def enable(
    model: torch.nn.Module,
    group: Optional[dist.ProcessGroup] = None,
    config: Optional[FrameShardingConfig] = None,
    *,
    cp_size: Optional[int] = None,
    timeout: Timeout = None,
    mesh: Optional[Mesh] = None,
) -> torch.nn.Module:
    """Makes the vision module of `model` shard its frames over `group` (None: the default
    torch.distributed group). `config=None` is FrameShardingConfig(enabled=True); `cp_size`
    (None: the group's size) must equal the group's size, or every rank raises on the first
    forward. `mesh` (a frameshard.Mesh; leave group and cp_size unset): balance the frames of
    every DP replica over the whole dp x cp mesh, each rank calling the vision module on its own
    replica's inputs (see the module's docstring). Calling it again replaces the
    group/config/mesh. Returns the vision module (for Nemotron Omni and PaddleOCR-VL, whose
    get_image_features is sharded instead -- frameshard.hf_families -- the model holding it)."""
    found = _features_model(model)
    if found is not None:
        from . import hf_families  # noqa: PLC0415

        return hf_families.enable(*found, group, config, cp_size=cp_size, timeout=timeout, mesh=mesh)
    visual = find_vision_module(model, fn="enable")
    if mesh is not None and (group is not None or cp_size is not None):
        raise FrameshardError(
            "frameshard.hf.enable: expected group and cp_size unset with a mesh (the Mesh names "
            "its group, dp and cp), got group=%s cp_size=%r" % (_kind(group), cp_size)
        )
    state = _State(
        group=None if mesh is not None else resolve_group(group, "hf.enable"),
        config=config if config is not None else FrameShardingConfig(enabled=True),
        cp_size=cp_size,
        timeout=timeout,
        family=str(family_of(visual)),
        dims=tower_dims(visual),
        mesh=mesh,
    )
    if state.config.split_frames:
        hf_split.install(visual, state.family)  # refuses a layout it was not checked on
    else:
        hf_split.uninstall(visual)
    setattr(visual, _STATE, state)
    visual.forward = types.MethodType(_skipped_by_compile(_sharded_forward), visual)
    return visual


def disable(model: torch.nn.Module) -> bool:
    """Restores the original forward of the vision module (Nemotron Omni, PaddleOCR-VL:
    get_image_features); False if it was not enabled."""
    found = _features_model(model)
    if found is not None:
        from . import hf_families  # noqa: PLC0415

        return hf_families.disable(found[0])
    visual = find_vision_module(model, fn="disable")
    if not hasattr(visual, _STATE):
        return False
    del visual.forward  # the instance attribute: the class's forward shows again
    delattr(visual, _STATE)
    hf_split.uninstall(visual)  # the split attention of the full-attention blocks, if any
    return True


def join_without_media(model: torch.nn.Module, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """With a mesh: the vision call of a rank whose replica has no media this step, where the
    other ranks call the vision module. Runs the sharded vision module on [0, features] pixel
    values (of `dtype`, default the vision module's, which is what Qwen-VL's get_image_features
    passes) and a [0, 3] grid, so this rank joins the collectives and encodes its share of the
    other replicas' frames; returns a zero scalar that depends on the outputs: add it to the
    loss, so that this rank joins the backward too (a zero scalar without graph when the mesh
    replicated the step: then there is no backward collective)."""
    visual = find_vision_module(model, fn="join_without_media")
    state: Optional[_State] = getattr(visual, _STATE, None)
    if state is None or state.mesh is None:
        raise FrameshardError(
            "frameshard.hf.join_without_media: expected a model enabled with a mesh "
            "(hf.enable(model, config=..., mesh=frameshard.Mesh(...))), got %s"
            % ("one without a mesh" if state is not None else "one not enabled")
        )
    embed = visual.patch_embed
    features = int(embed.in_channels * embed.temporal_patch_size * embed.patch_size**2)
    param = next(visual.parameters())
    dtype = dtype if dtype is not None else param.dtype
    pixels = torch.zeros(0, features, dtype=dtype, device=param.device)
    out = visual(pixels, grid_thw=torch.zeros(0, 3, dtype=torch.int64, device=param.device))
    zero = torch.zeros((), dtype=dtype, device=param.device)
    if out is None:
        return zero
    tensors = [out.pooler_output] + list(getattr(out, "deepstack_features", None) or [])
    return sum((0 * t.sum() for t in tensors), zero)


def is_enabled(model: torch.nn.Module) -> bool:
    """Whether `enable` is in force on the model's vision module (Nemotron Omni, PaddleOCR-VL: on
    the model holding get_image_features)."""
    found = _features_model(model)
    if found is not None:
        return hasattr(found[0], _STATE)
    return hasattr(find_vision_module(model, fn="is_enabled"), _STATE)


@functools.lru_cache(maxsize=None)
def _skipped_by_compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with its own frame skipped by torch.compile (a graph break) while the frames it calls
    are compiled as the user asked: `torch.compiler.disable(fn, recursive=False)`.

    Applied to `_sharded_forward` and to the `shard_vision` it calls: their collectives, the C++
    encode and the output rebuilt from the gathered rows cannot be traced, but the tower that the
    C++ encode calls back -- the vision module's original forward -- is compiled as it would be
    without frameshard. A full disable (recursive=True) would be as correct but would run the
    tower eagerly, losing what compiling the vision module is for. Wrapped at the first
    `enable`, not at import: torch.compiler.disable imports torch._dynamo (seconds)."""
    return torch.compiler.disable(fn, recursive=False)


def _passes_through(error: Optional[BaseException]) -> bool:
    """Whether a tower exception is control flow that must reach its caller as raised: the
    early stop of a non-reentrant torch.utils.checkpoint recomputation, which every rank raises
    in its own tower (all saved tensors of the checkpointed vision call are the tower's)."""
    from torch.utils import checkpoint  # noqa: PLC0415

    stop = getattr(checkpoint, "_StopRecomputationError", None)
    return stop is not None and isinstance(error, stop)


def _reraise(error: FrameshardError, raised: Optional[BaseException]) -> NoReturn:
    """Raises what a sharded call's FrameshardError `error` means to its caller. Every rank raises
    it (the ranks agree on failure); this rank's own tower exception `raised`, if any, is its
    cause -- or, for checkpoint's early stop, what the caller expects, as raised."""
    if _passes_through(raised):
        raise raised from None
    if raised is not None:
        raise error from raised
    raise error


def _without_pieces(tower: Callable[..., Any]) -> Callable[..., Any]:
    """`tower` as a three-argument tower (no pieces, no exchange): without split_frames the plan
    never cuts a frame, and a tower that takes pieces would let shard_vision accept a config
    that the vision module was not patched for."""

    def call(pv: torch.Tensor, grid: torch.Tensor, cu: torch.Tensor) -> Any:
        return tower(pv, grid, cu, pieces=(), exchange=None)

    return call


def _sharded_forward(
    visual: torch.nn.Module, hidden_states: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Any
) -> Any:
    """The vision module's forward while enabled (bound to the instance; see enable)."""
    state: _State = getattr(visual, _STATE)
    # Precomputed per-batch geometry (transformers' vision_utils) describes the whole batch, not
    # the local frames: refused on the sharded path.
    precomputed = sorted(k for k, v in kwargs.items() if isinstance(v, torch.Tensor))
    if precomputed:
        raise FrameshardError(
            "frameshard.hf: expected no precomputed vision tensors (they describe the whole "
            "batch; each rank encodes only its frames), got %s" % ", ".join(precomputed)
        )
    return_dict = kwargs.pop("return_dict", None)
    original = type(visual).forward
    last: list[Any] = [None]
    raised: list[Optional[BaseException]] = [None]

    def tower(
        pv: torch.Tensor, grid: torch.Tensor, cu: torch.Tensor, *, pieces: tuple, exchange: Any
    ) -> list[torch.Tensor]:
        # The original forward recomputes cu_seqlens, rotary, (Qwen2.5-VL) window indices and
        # (GLM-4V) the interpolated position embedding from the local grid; every one of them is
        # per frame, so the local frames encode as they would in the whole batch. Pieces of
        # split frames (split_frames) take them from the whole frame instead (hf_split).
        try:
            local = tower_grid(state.family, grid)

            def run(**geometry: Any) -> Any:
                return original(visual, pv, grid_thw=local, return_dict=True, **geometry, **kwargs)

            if exchange is None:
                out = run()
            else:
                out = hf_split.run_split(visual, state.family, run, local, cu, pieces, exchange)
        except BaseException as e:
            raised[0] = e
            raise
        last[0] = out
        return [out.pooler_output] + list(getattr(out, "deepstack_features", None) or [])

    if not state.config.split_frames:
        tower = _without_pieces(tower)
    try:
        outputs, plan = _skipped_by_compile(shard_vision)(
            tower,
            hidden_states,
            grid_thw,
            state.group,
            state.config,
            cp_size=state.cp_size,
            mesh=state.mesh,
            spatial_merge_size=int(visual.spatial_merge_size),
            temporal_patch_size=int(visual.config.temporal_patch_size),
            tower_trainable=any(p.requires_grad for p in visual.parameters()),
            timeout=state.timeout,
            return_plan=True,
            tower_dims=state.dims,
        )
    except FrameshardError as e:
        _reraise(e, raised[0])
    if outputs is None:
        return None  # a text-only replica on the mesh's replicated path: no tower ran
    out = last[0]
    if plan.sharded and return_dict is False:
        # A tuple would start with last_hidden_state, which is rank-local here.
        raise FrameshardError(
            "frameshard.hf: expected return_dict=True or unset on the sharded path (the sharded "
            "output has no last_hidden_state), got return_dict=False"
        )
    if plan.sharded:
        fields = {"pooler_output": outputs[0]}
        if hasattr(out, "deepstack_features"):
            fields["deepstack_features"] = list(outputs[1:])
        out = type(out)(**fields)
    if return_dict is False:
        return out.to_tuple()
    return out


# Context parallelism for the language model (frameshard.hf_cp), re-exported here.
from .hf_cp import ContextParallel, context_parallel  # noqa: E402
from .hf_cp import remove as remove_context_parallel  # noqa: E402
