"""The sharded call of a whole-tower vision module: its forward, on this rank's frames only.

`frameshard.hf.enable` installs `sharded_forward` as the forward of the vision module INSTANCE
(the class is untouched; `disable` restores it). It runs the class's forward on this rank's frames
through `frameshard.shard_vision` and returns the same output class with the gathered
`pooler_output` (the merged embeddings) and, for Qwen3-VL, the gathered `deepstack_features`.
Per-patch fields (`last_hidden_state`, `hidden_states`, `attentions`) would be rank-local and are
None on the sharded path; on the replicated path the original output is returned unchanged.
The original forward recomputes every piece of geometry (cu_seqlens, rotary, windows, position
tables) from the local grid; all of it is per frame, so local frames encode as in the whole batch.

`sharded_call` is the sharded call of every enabled module, this one's and _features' (a model
sharded at get_image_features): each site keeps only how it runs its module on the local frames
(a `LocalCall`) and what it makes of the gathered rows.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, Protocol

import torch
from torch.utils import checkpoint

from .. import _shard
from .._C import FrameshardError
from .._config import FrameShardingConfig
from .._groups import Mesh, Timeout
from .._plan import Plan
from .._shard import TowerGeometry
from .._towers import TowerDims
from . import _compat, _patches, _split
from ._family import Family, tower_grid

OWNER = "vision"  # the patch registry's owner of the vision module's patches
TOKEN_OWNER = "frameshard_token_owner"  # the CP rank of each visual token (gather owner, _cp_owner)


class CallHooks(Protocol):
    """What a caller that drives the vision calls itself (a trainer integration,
    frameshard.integrations) is asked around each sharded call of an enabled vision module."""

    def before(self, visual: torch.nn.Module, grid_thw: torch.Tensor) -> Sequence[Any] | None:
        """Before the sharded call: the media_keys for shard_vision, or None (hash the pixels).
        Collective where the caller makes it so (a lockstep exchange)."""

    def after(self, plan: Plan) -> None:
        """The plan of a call that ran (its dedup counts, its path)."""


@dataclasses.dataclass
class State:
    """What one enabled module shards with: a vision module, or a model sharded at
    get_image_features (_features; one CP group, no mesh, no hooks)."""

    group: Any  # the process group (with a mesh: the mesh's group)
    config: FrameShardingConfig
    cp_size: int | None
    timeout: Timeout
    family: Family
    dims: TowerDims | None
    mesh: Mesh | None = None
    calls: CallHooks | None = None  # set by a trainer integration after enable


@functools.cache
def skipped_by_compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with its own frame skipped by torch.compile (a graph break) while the frames it calls
    are compiled as the user asked: `torch.compiler.disable(fn, recursive=False)`.

    Applied to `sharded_forward` and to the `shard_vision` it calls: their collectives, the C++
    encode and the output rebuilt from the gathered rows cannot be traced, but the tower that the
    C++ encode calls back -- the vision module's original forward -- is compiled as it would be
    without frameshard. A full disable (recursive=True) would be as correct but would run the
    tower eagerly, losing what compiling the vision module is for. Wrapped at the first
    `enable`, not at import: torch.compiler.disable imports torch._dynamo (seconds)."""
    return torch.compiler.disable(fn, recursive=False)


def _passes_through(error: BaseException | None) -> bool:
    """Whether a tower exception is control flow that must reach its caller as raised: the
    early stop of a non-reentrant torch.utils.checkpoint recomputation, which every rank raises
    in its own tower (all saved tensors of the checkpointed vision call are the tower's)."""
    stop = getattr(checkpoint, "_StopRecomputationError", None)
    return stop is not None and isinstance(error, stop)


def reraise(error: FrameshardError, raised: BaseException | None) -> NoReturn:
    """Raises what a sharded call's FrameshardError `error` means to its caller. Every rank raises
    it (the ranks agree on failure); this rank's own tower exception `raised`, if any, is its
    cause -- or, for checkpoint's early stop, what the caller expects, as raised."""
    if _passes_through(raised):
        raise raised from None
    if raised is not None:
        raise error from raised
    raise error


def vision_outputs(out: Any) -> list[torch.Tensor]:
    """The tensors the vision module's output carries to the gather: pooler_output (the merged
    embeddings) and DeepStack features. A release whose vision forward returns a plain tensor
    (transformers 4.x) is named, not run into an AttributeError."""
    if not hasattr(out, "pooler_output"):
        raise FrameshardError(
            "frameshard.hf: expected the vision module to return an output with pooler_output "
            "(transformers >= %s), got %s from transformers %s"
            % (_compat.oldest_transformers(), type(out).__name__, _compat.transformers_version())
        )
    return [out.pooler_output] + list(getattr(out, "deepstack_features", None) or [])


class LocalCall:
    """The base of the tower shard_vision calls back for an enabled module: the class's own method
    on this rank's frames. Keeps the last output (its class rebuilds the gathered one) and the
    exception this rank's own call raised (the cause of the error every rank raises)."""

    def __init__(self, module: torch.nn.Module, state: State, kwargs: dict) -> None:
        self.module, self.state, self.kwargs = module, state, kwargs
        self.last: Any = None
        self.raised: BaseException | None = None
        self.frameshard_log = (module, "hf.enable(%s)" % type(module).__name__)

    def record(self, run: Callable[[], Any], tensors: Callable[[Any], Any]) -> Any:
        """`tensors(run())`, keeping run's output as `last` and what either raises as `raised`."""
        try:
            out = run()
            result = tensors(out)
        except BaseException as e:
            self.raised = e
            raise
        self.last = out
        return result


class _LocalTower(LocalCall):
    """The vision module's class forward on this rank's frames; pieces of split frames take the
    whole frame's geometry (_split)."""

    @property
    def exchanges_per_call(self) -> int:
        """One K/V exchange per full-attention block (shard_vision's PieceTower attribute)."""
        return len(self.state.family.split.full_attention_blocks(self.module))

    def __call__(self, pv: torch.Tensor, grid: torch.Tensor, cu: torch.Tensor, *, pieces: tuple, exchange: Any) -> list:
        visual, family = self.module, self.state.family
        original = type(visual).forward

        def run() -> Any:
            local = tower_grid(family, grid)

            def forward(**geometry: Any) -> Any:
                return original(visual, pv, grid_thw=local, return_dict=True, **geometry, **self.kwargs)

            if exchange is None:
                return forward()
            return _split.run_split(visual, family, forward, local, cu, pieces, exchange)

        return self.record(run, vision_outputs)


class _WholeFrames(_LocalTower):
    """A three-argument tower (no pieces, no exchange): without split_frames the plan never cuts a
    frame, and a tower that takes pieces would let shard_vision accept a config that the vision
    module was not patched for."""

    def __call__(self, pv: torch.Tensor, grid: torch.Tensor, cu: torch.Tensor) -> list:  # type: ignore[override]
        return super().__call__(pv, grid, cu, pieces=(), exchange=None)


def refuse_precomputed(kwargs: dict, units: str) -> None:
    """Precomputed per-batch geometry (transformers' vision_utils) describes the whole batch, not
    this rank's `units`: refused on the sharded path."""
    precomputed = sorted(k for k, v in kwargs.items() if isinstance(v, torch.Tensor))
    if precomputed:
        raise FrameshardError(
            "frameshard.hf: expected no precomputed vision tensors (they describe the whole "
            "batch; each rank encodes only its %s), got %s" % (units, ", ".join(precomputed))
        )


def sharded_call(
    local: LocalCall,
    pixels: torch.Tensor,
    grid: torch.Tensor,
    geometry: TowerGeometry,
    *,
    trainable: bool,
    return_dict: bool | None,
    token_owner: Sequence[int] | None = None,
) -> tuple[Any, bool]:
    """The sharded call of an enabled module: shard_vision of `local` with the module's State,
    between its hooks. Returns (the gathered outputs, or None when no tower ran -- a text-only
    replica on the mesh's replicated path; whether they replace the module's own output, which
    then holds only this rank's frames, each distinct frame once (dedup with repeats, also on the
    replicated path) or, with token owners, other rows than this rank's). Raises what a failure
    means to the caller (reraise)."""
    state = local.state
    media_keys = state.calls.before(local.module, grid) if state.calls is not None else None
    try:
        outputs, plan = skipped_by_compile(_shard.shard_vision)(
            local,
            pixels,
            grid,
            state.group,
            state.config,
            geometry=geometry,
            cp_size=state.cp_size,
            mesh=state.mesh,
            tower_trainable=trainable,
            timeout=state.timeout,
            return_plan=True,
            tower_dims=state.dims,
            token_owner=token_owner,
            media_keys=media_keys,
        )
    except FrameshardError as e:
        reraise(e, local.raised)
    if state.calls is not None:
        state.calls.after(plan)
    if outputs is None:
        return None, False
    routed = plan.sharded or token_owner is not None or _shard.deduplicated(plan)
    if routed and return_dict is False:
        # A tuple would start with last_hidden_state, which is rank-local here.
        raise FrameshardError(
            "frameshard.hf: expected return_dict=True or unset on the sharded path (the sharded "
            "output has no last_hidden_state), got return_dict=False"
        )
    return outputs, routed


def sharded_forward(visual: torch.nn.Module, hidden_states: torch.Tensor, grid_thw: torch.Tensor, **kwargs: Any) -> Any:
    """The vision module's forward while enabled (bound to the instance; see enable)."""
    state: State = _patches.state(visual, OWNER)
    refuse_precomputed(kwargs, "frames")
    return_dict = kwargs.pop("return_dict", None)
    token_owner = kwargs.pop(TOKEN_OWNER, None)
    if state.config.gather == "owner" and token_owner is None:
        raise FrameshardError(
            "frameshard.hf: distributed.multimodal.vision.frame_sharding.gather: expected 'all' for a "
            "vision call outside hf.context_parallel's owner path (with 'owner', call hf.enable and "
            "hf.context_parallel on the same whole model: its forward routes each visual row to the "
            "CP rank holding its token), got 'owner' and a call without token owners"
        )
    local = (_LocalTower if state.config.split_frames else _WholeFrames)(visual, state, kwargs)
    geometry = TowerGeometry(int(visual.spatial_merge_size), int(visual.config.temporal_patch_size))
    trainable = any(p.requires_grad for p in visual.parameters())
    outputs, routed = sharded_call(
        local, hidden_states, grid_thw, geometry, trainable=trainable, return_dict=return_dict, token_owner=token_owner
    )
    if outputs is None:
        return None  # a text-only replica on the mesh's replicated path: no tower ran
    out = local.last
    if routed:  # the gathered rows (one block per use) replace the tower's own
        outputs = (outputs,) if isinstance(outputs, torch.Tensor) else outputs
        fields = {"pooler_output": outputs[0]}
        if hasattr(out, "deepstack_features"):
            fields["deepstack_features"] = list(outputs[1:])
        out = type(out)(**fields)
    return out.to_tuple() if return_dict is False else out


def join(visual: torch.nn.Module, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A call of the enabled vision module `visual` without frames of this rank's own ([0,
    features] pixel values of `dtype`, default the module's, and a [0, 3] grid): it joins the
    collectives of the other ranks' calls and encodes its share of their frames. Returns a zero
    scalar that depends on the outputs, to add to a loss (so that this rank joins the backward
    too), or a zero scalar without graph when no tower ran (the mesh's replicated path)."""
    state = _patches.state(visual, OWNER)
    embed = visual.patch_embed
    features = int(embed.in_channels * embed.temporal_patch_size * embed.patch_size**2)
    param = next(visual.parameters())
    dtype = dtype if dtype is not None else param.dtype
    pixels = torch.zeros(0, features, dtype=dtype, device=param.device)
    owners = {TOKEN_OWNER: []} if state is not None and state.config.gather == "owner" else {}  # no visual token
    out = visual(pixels, grid_thw=torch.zeros(0, 3, dtype=torch.int64, device=param.device), **owners)
    zero = torch.zeros((), dtype=dtype, device=param.device)
    if out is None:
        return zero
    return sum((0 * t.sum() for t in vision_outputs(out)), zero)
