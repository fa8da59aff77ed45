"""Owner-routed visual rows under context parallelism: "merge after the split".

`hf.context_parallel(model, group)` installs `owner_forward` as the forward of the multimodal
model INSTANCE (`model.model`, e.g. a Qwen2_5_VLModel; the class is untouched) under the patch
registry's owner "cp_owner", recorded on the language model so that `remove_context_parallel`
undoes it with the rest. At every forward it decides:

- the vision module is enabled by `hf.enable` with a config whose gather is "owner": the owner
  path below;
- otherwise: the class's forward, unchanged (the whole sequence up to the language model, every
  visual row on every rank, as context_parallel does without owner routing).

The owner path, on every rank of the CP group (every rank passes the whole batch):

1. the multimodal rotary position ids (mRoPE) of the WHOLE sequence, from input_ids, the grids
   and mm_token_type_ids (transformers' compute_3d_position_ids: no pixels needed);
2. the split: this rank's positions (`_cp_layout.chunk_positions`, end padding), one agreement
   exchange; input_ids, the placeholder masks and the position ids are cut there;
3. the token embedding of this rank's tokens only (the padding rows are zeros, as without
   owner routing);
4. the vision module (frame-sharded by hf.enable) with `token_owner` = the CP rank holding each
   image / video token: the owner-routed gather (one all-to-all) gives this rank only the
   visual rows of its positions, in ascending token order, DeepStack rows too (Qwen3-VL);
5. the merge of those rows into this rank's rows (masked_scatter, as transformers merges);
6. the class's forward on the local rows (no pixels, the local position ids), whose language
   model (`_cp._lm_forward`) takes them as already cut: the decoder layers run as without owner
   routing (the CP attention, Qwen3.5's linear attention).

Over a dp x cp mesh (hf.enable with mesh_dims [dp, cp]) the owners are CP ranks of this rank's
replica and the frames of every replica are balanced over the mesh (frameshard's encode_mesh
routes each row to its replica's owner); a replica without media this step adds
`hf.join_without_media(model)` to its loss, as without owner routing. The labels are cut by
`ContextParallel.loss` as before. Refused (FrameshardError, the same on every rank, before any
collective): inputs_embeds without input_ids, precomputed mm_encoder_outputs, and a CP group
other than hf.enable's group (with a mesh: other than this replica's cp ranks of the mesh).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from typing import Any

import torch
import torch.distributed as dist

from .._C import FrameshardError
from .._unwrap import unwrap_module
from . import _cp_layout, _patches, _vision

OWNER = "cp_owner"  # the patch registry's owner (recorded on the language model)
GATHER_FIELD = "distributed.multimodal.vision.frame_sharding.gather"
MESH_FIELD = "distributed.multimodal.vision.frame_sharding.mesh_dims"


@dataclasses.dataclass
class Stats:
    """The latest owner-path forward on this rank (bench/hf_owner_bytes.py, the tests)."""

    visual_rows: int = 0  # visual rows this rank received from the vision call(s)
    visual_bytes: int = 0  # their bytes, every output (embeddings and DeepStack) together
    embeds_rows: int = 0  # inputs_embeds rows this rank holds (its positions, padding included)
    embeds_bytes: int = 0


@dataclasses.dataclass
class State:
    """The owner path's install (the patch registry's state under OWNER, on the language model)."""

    multimodal: torch.nn.Module
    language_model: torch.nn.Module
    cp: Any  # _cp._State: the CP install (group, split; `layout` per forward)
    last: Stats | None = None  # None until an owner-path forward ran


def multimodal_model(model: Any, lm: torch.nn.Module) -> torch.nn.Module | None:
    """The module of `model` whose `language_model` is `lm` and that has a `visual` (the
    ...Model of a ...ForConditionalGeneration, or `model` itself); None when context_parallel
    was given the language model alone."""
    root = unwrap_module(model)
    for c in (root, getattr(root, "model", None)):
        c = unwrap_module(c) if c is not None else None
        inner = getattr(c, "language_model", None) if c is not None else None
        if inner is not None and unwrap_module(inner) is lm and getattr(c, "visual", None) is not None:
            return c
    return None


def install(model: Any, lm: torch.nn.Module, cp_state: Any) -> None:
    """Called by context_parallel once it installed `cp_state` (a _cp._State) on `lm`: installs
    owner_forward on the multimodal model of `model` (nothing when there is none)."""
    mm = multimodal_model(model, lm)
    if mm is None:
        _patches.remove(lm, OWNER)
        return
    _patches.install(lm, OWNER, State(mm, lm, cp_state), [(mm, "forward", types.MethodType(owner_forward, mm))])


def remove(lm: torch.nn.Module) -> bool:
    """Undoes `install` (called by context_parallel's remove); False if it was not installed."""
    return _patches.remove(lm, OWNER)


def last_stats(model: Any) -> Stats | None:
    """The latest owner-path forward's Stats on this rank (None: none ran)."""
    state = _patches.state(_cp_layout.find_language_model(model, fn="last_stats"), OWNER)
    return state.last if state is not None else None


def _vision_state(mm: torch.nn.Module) -> Any:
    return _patches.state(unwrap_module(mm.visual), _vision.OWNER)


def _ranks(pg: dist.ProcessGroup) -> list[int]:
    return list(dist.get_process_group_ranks(pg))


def _check(vstate: Any, cp_state: Any) -> None:
    """What the owner path cannot do, refused on every rank before any collective: the CP group
    must be hf.enable's group or, over a dp x cp mesh, this rank's replica's cp ranks of it (the
    owners are CP ranks of the replica)."""
    ours = _ranks(cp_state.group)
    mesh = vstate.mesh
    if mesh is None:
        theirs = _ranks(vstate.group)
        if theirs != ours:
            raise FrameshardError(
                "frameshard.hf.context_parallel: expected hf.enable's group and context_parallel's group "
                "to hold the same ranks in the same order with %s 'owner', got %s and %s" % (GATHER_FIELD, theirs, ours)
            )
        return
    everyone = _ranks(mesh.group if mesh.group is not None else dist.group.WORLD)
    replica = everyone.index(dist.get_rank()) // mesh.cp
    theirs = everyone[replica * mesh.cp : (replica + 1) * mesh.cp]
    if theirs != ours:
        raise FrameshardError(
            "frameshard.hf.context_parallel: %s [dp, cp]: expected context_parallel's group to hold this "
            "replica's cp ranks %s of hf.enable's mesh with %s 'owner', got %s"
            % (MESH_FIELD, theirs, GATHER_FIELD, ours)
        )


def _bind(mm: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[dict, dict]:
    """(named arguments, extra keyword arguments) of the class's forward."""
    sig = inspect.signature(type(mm).forward)
    bound = sig.bind(mm, *args, **kwargs)
    named, extra = {}, {}
    for name, value in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            extra.update(value)
        elif name != "self":
            named[name] = value
    return named, extra


def _call(fn: Any, **kwargs: Any) -> Any:
    """fn(**kwargs) keeping only the arguments it takes (the names vary across releases)."""
    params = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in kwargs.items() if k in params})


def _whole_positions(mm: torch.nn.Module, named: dict, input_ids: torch.Tensor, width: torch.Tensor) -> Any:
    """The model's position ids of the whole sequence (mRoPE, [3 or 4, B, S]; None for text)."""
    if named.get("position_ids") is not None:
        return named["position_ids"]
    b, s = input_ids.shape
    return _call(
        mm.compute_3d_position_ids,
        input_ids=input_ids,
        inputs_embeds=width.expand(b, s, 1),  # its shape only (unused when input_ids are given)
        image_grid_thw=named.get("image_grid_thw"),
        video_grid_thw=named.get("video_grid_thw"),
        second_per_grid_ts=named.get("second_per_grid_ts"),
        attention_mask=named.get("attention_mask"),
        cache=None,
        past_key_values=None,
        mm_token_type_ids=named.get("mm_token_type_ids"),
    )


def _placeholder_masks(mm: torch.nn.Module, input_ids: torch.Tensor, width: torch.Tensor) -> dict:
    """{"image": [B, S] bool, "video": ...}: the whole sequence's placeholder tokens of each
    modality as the model's get_placeholder_mask finds them (GLM-4V marks video frames with the
    image token)."""
    b, s = input_ids.shape
    image, video = _call(mm.get_placeholder_mask, input_ids=input_ids, inputs_embeds=width.expand(b, s, 1))
    return {"image": image[..., 0].to(input_ids.device), "video": video[..., 0].to(input_ids.device)}


def _bytes(t: torch.Tensor) -> int:
    """The bytes of t's elements (Stats)."""
    return int(t.numel()) * t.element_size()


def _local_rows(
    mm: torch.nn.Module,
    pixels: torch.Tensor,
    grid: torch.Tensor,
    whole: torch.Tensor,
    owner_of: torch.Tensor,
    modality: str,
    stats: Stats,
) -> list[torch.Tensor]:
    """The vision module's rows of this rank's `whole`-mask tokens: [embeddings, DeepStack...]."""
    positions = whole.nonzero()[:, 1]  # row-major: the order of the vision rows
    owners = owner_of[positions.cpu()].tolist()
    visual = mm.visual
    # The grid as the model passes it or, for GLM-4V, with (t, h, w) rows: the sharded forward
    # (hf.enable) expands frames itself.
    out = visual(pixels.type(unwrap_module(visual).dtype), grid_thw=grid, **{_vision.TOKEN_OWNER: owners})
    rows = [out.pooler_output] + list(getattr(out, "deepstack_features", None) or [])
    stats.visual_rows += int(rows[0].shape[0])
    stats.visual_bytes += sum(_bytes(r) for r in rows)
    return rows


def owner_forward(mm: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    """The multimodal model's forward while context_parallel is installed (see the module)."""
    vstate = _vision_state(mm)
    if vstate is None or vstate.config.gather != "owner":
        return type(mm).forward(mm, *args, **kwargs)
    lm = unwrap_module(mm.language_model)
    state: State = _patches.state(lm, OWNER)
    named, extra = _bind(mm, args, kwargs)
    _refuse(named, extra, vstate, state.cp)

    embed = mm.get_input_embeddings()
    width = embed.weight.new_zeros(())
    input_ids = named["input_ids"]
    b, s = input_ids.shape
    whole_ids = _whole_positions(mm, named, input_ids, width)  # before any collective
    agree = torch.tensor([b, s, int(embed.weight.shape[-1])], dtype=torch.int64)
    fwd = state.cp.layout(s, embed.weight.device, agree)
    embeds = _local_embeds(embed, input_ids, fwd)
    stats = Stats(embeds_rows=int(embeds.shape[0] * embeds.shape[1]), embeds_bytes=_bytes(embeds))
    embeds, masks, deepstack = _merge_visual(mm, named, width, fwd, embeds, stats)
    position_ids = _cp_layout.local_position_ids(whole_ids, fwd, b, s, input_ids.device)

    state.last = stats
    extra[_cp_layout.LOCAL] = _cp_layout.Local(fwd, _deepstack(lm, masks, deepstack))
    return type(mm).forward(mm, **_local_call(named, embeds, position_ids), **extra)


def _refuse(named: dict, extra: dict, vstate: Any, cp_state: Any) -> None:
    """What the owner path does not support, refused on every rank before any collective: no
    input_ids, inputs_embeds, precomputed mm_encoder_outputs, what the CP forward refuses, a CP
    group other than hf.enable's (`_check`)."""
    if named.get("input_ids") is None or named.get("inputs_embeds") is not None:
        raise FrameshardError(
            "frameshard.hf.context_parallel: expected input_ids and no inputs_embeds with %s 'owner' "
            "(the placeholders tell each rank its visual rows), got %s"
            % (GATHER_FIELD, "inputs_embeds" if named.get("inputs_embeds") is not None else "no input_ids")
        )
    if named.get("mm_encoder_outputs"):
        raise FrameshardError(
            "frameshard.hf.context_parallel: expected no mm_encoder_outputs with %s 'owner' (the "
            "vision rows are routed by the sharded vision module), got precomputed outputs" % GATHER_FIELD
        )
    cache = named.get("cache", named.get("past_key_values"))
    _cp_layout.refuse_unsupported(named.get("attention_mask"), cache, extra)
    _check(vstate, cp_state)


def _local_embeds(embed: torch.nn.Module, input_ids: torch.Tensor, fwd: _cp_layout.Forward) -> torch.Tensor:
    """The split: this rank's token ids (padding -1) embedded alone -> [B, local, hidden]; the
    padding rows are zeros (as without owner routing)."""
    pad = int(fwd.order.numel()) - input_ids.shape[1]
    ids = _cp_layout.pad(input_ids, pad, dim=1, value=-1)[:, fwd.positions.to(input_ids.device)]
    valid = (ids >= 0).unsqueeze(-1)
    embeds = embed(ids.clamp(min=0))
    return torch.where(valid.to(embeds.device), embeds, torch.zeros((), dtype=embeds.dtype, device=embeds.device))


def _merge_visual(
    mm: torch.nn.Module, named: dict, width: torch.Tensor, fwd: _cp_layout.Forward, embeds: torch.Tensor, stats: Stats
) -> tuple[torch.Tensor, dict, dict]:
    """The vision module's rows of this rank's image and video tokens (one owner-routed call per
    modality passed), merged into `embeds` as transformers merges them (masked_scatter) ->
    (embeds, {modality: this rank's placeholder mask}, {modality: its DeepStack rows})."""
    input_ids = named["input_ids"]
    pad = int(fwd.order.numel()) - input_ids.shape[1]
    owner_of = _cp_layout.owner_of_positions(fwd)  # the rank whose chunks hold each position
    placeholders = _placeholder_masks(mm, input_ids, width)
    masks, deepstack = {}, {}
    for modality, pixels_key, grid_key in (
        ("image", "pixel_values", "image_grid_thw"),
        ("video", "pixel_values_videos", "video_grid_thw"),
    ):
        pixels = named.get(pixels_key)
        if pixels is None:
            continue
        whole = placeholders[modality]
        rows = _local_rows(mm, pixels, named.get(grid_key), whole, owner_of, modality, stats)
        local = _cp_layout.pad(whole, pad, dim=1, value=False)[:, fwd.positions.to(whole.device)].to(embeds.device)
        if int(local.sum()) != int(rows[0].shape[0]):
            raise FrameshardError(
                "frameshard.hf.context_parallel: expected %d %s rows for this rank's %s tokens, got %d"
                % (int(local.sum()), modality, modality, int(rows[0].shape[0]))
            )
        mask = local.unsqueeze(-1).expand_as(embeds)
        embeds = embeds.masked_scatter(mask, rows[0].to(embeds.device, embeds.dtype))
        masks[modality] = local
        if len(rows) > 1:
            deepstack[modality] = rows[1:]
    return embeds, masks, deepstack


def _local_call(named: dict, embeds: torch.Tensor, position_ids: torch.Tensor) -> dict:
    """The class forward's named arguments on this rank's rows: the merged embeddings and the
    local position ids, no input_ids, pixels, grids or attention mask."""
    call = dict(named)
    for key in ("pixel_values", "pixel_values_videos", "image_grid_thw", "video_grid_thw", "mm_token_type_ids"):
        if key in call:
            call[key] = None
    call.update(input_ids=None, inputs_embeds=embeds, position_ids=position_ids, attention_mask=None)
    return call


def _deepstack(lm: torch.nn.Module, masks: dict, deepstack: dict) -> dict:
    """This rank's DeepStack inputs (Qwen3-VL), joined over images and videos as transformers
    joins them; {} for a language model without DeepStack."""
    if not deepstack or "deepstack_visual_embeds" not in inspect.signature(type(lm).forward).parameters:
        return {}
    if len(deepstack) == 1:
        modality = next(iter(deepstack))
        return {"visual_pos_masks": masks[modality], "deepstack_visual_embeds": list(deepstack[modality])}
    image, video = masks["image"], masks["video"]
    joint = image | video
    image_joint, video_joint = image[joint], video[joint]
    embeds = []
    for img, vid in zip(deepstack["image"], deepstack["video"], strict=True):
        level = img.new_zeros(int(joint.sum()), img.shape[-1])
        level[image_joint, :] = img
        level[video_joint, :] = vid
        embeds.append(level)
    return {"visual_pos_masks": joint, "deepstack_visual_embeds": embeds}
