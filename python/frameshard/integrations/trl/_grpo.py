"""TRL's GRPOTrainer with each distinct image encoded once across all processes per vision pass.

`install` wraps methods of the trainer INSTANCE (its class is untouched; `remove` restores them,
through the same patch registry as frameshard.hf):

- The policy model's own `generate` (the generation: it encodes the images before or in its
  prefill) and `_get_per_token_logps_and_entropies` (the old and reference log-probs without
  gradients, the loss's forward with them) are passes of the Lockstep (integrations/_lockstep.py):
  their vision calls line up across processes, and a process whose batch has no image joins the
  others' (forward hooks of each enabled model's module that calls its vision module).
- `_generate_and_score_completions` knows which rows are copies: RepeatSampler repeats each
  prompt G times in a row of the global batch, and accelerate hands each process a contiguous
  slice of it (TRL's own `process_slice` rests on the same order), so global row i belongs to
  prompt group i // G. Its images are keyed (group, index in the row): nothing is hashed. The
  groups are checked where a process can check them (its own rows of one group must be equal,
  images included; otherwise it hashes the pixels) and travel with the rows through TRL's
  shuffle and split (the batch key `frameshard_groups`), to the loss pass.
- `training_step` / `prediction_step` put what the vision calls encoded into TRL's metrics
  (`frameshard/vision_rows_total`, `..._distinct`, frames alike), once per optimizer step.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable
from typing import Any

import torch

from ... import _unwrap
from ...hf import _patches
from .._lockstep import Counts, Lockstep, media_calls

_LOG = logging.getLogger("frameshard")
OWNER = "trl"  # the patch registry's owner of the trainer's patches
GROUPS_KEY = "frameshard_groups"  # the batch key of each row's prompt group


@dataclasses.dataclass
class Session:
    """What one enabled trainer runs with (the patch registry's state of OWNER)."""

    lockstep: Lockstep
    keys: str  # "groups" (the trainer's prompt groups) or "pixels" (frame_keys)
    roots: list[torch.nn.Module]  # the unwrapped models: the policy, then the reference model
    visuals: list[torch.nn.Module]  # their enabled vision modules
    hooks: list[Any]  # forward hook handles (the joins inside a forward)
    row_groups: list[int] | None = None  # of the rows being processed
    pending: tuple = (None, None)  # (keys, grid) of the generation about to run
    step: Counts = dataclasses.field(default_factory=Counts)

    def model_index(self, model: Any) -> int | None:
        root = _unwrap.unwrap_module(model)
        return next((i for i, r in enumerate(self.roots) if r is root), None)


def row_groups(trainer: Any, inputs: list[dict]) -> list[int] | None:
    """The global prompt group of each of this process's rows (see the module docstring), or None
    when this process's own rows of a group differ (not copies: hash the pixels)."""
    n = len(inputs)
    g = int(trainer.num_generations if trainer.model.training else trainer.num_generations_eval)
    start = int(trainer.accelerator.process_index) * n
    groups = [(start + i) // g for i in range(n)]
    first: dict[int, dict] = {}
    for group, row in zip(groups, inputs, strict=True):
        if group in first and first[group] != row:
            return None
        first.setdefault(group, row)
    return groups


def image_keys(groups: list[int] | None, num_images: list[int] | None) -> list[tuple[int, int]] | None:
    """The media key of every image of the rows, in row order: (group, index in its row)."""
    if groups is None or num_images is None or len(groups) != len(num_images):
        return None
    return [(g, j) for g, n in zip(groups, num_images, strict=True) for j in range(n)]


def _bound(method: Callable, args: tuple, kwargs: dict) -> dict:
    b = inspect.signature(method).bind(*args, **kwargs)
    b.apply_defaults()
    return b.arguments


def _generate_and_score(session: Session, trainer: Any) -> Callable[[Callable], Callable]:
    def make(original: Callable) -> Callable:
        def call(inputs: list[dict]) -> dict:
            groups = row_groups(trainer, inputs) if session.keys == "groups" else None
            session.row_groups = groups
            try:
                out = original(inputs)
            finally:
                session.row_groups = None
            if groups is not None:
                out[GROUPS_KEY] = torch.tensor(groups, dtype=torch.int64)
            return out

        return call

    return make


def _generate(session: Session) -> Callable[[Callable], Callable]:
    """The policy model's own `generate` (what TRL's _generate_single_turn calls, through its
    unwrapped model and any PEFT wrapper): the generation pass, one slot at its start for the
    images and videos it encodes (transformers encodes them before the prefill when the model
    takes `mm_encoder_outputs`: the joins then run at once, else in the prefill's forward). Its
    bounds lie inside TRL's, so that no collective of the trainer's (a gather of lengths, FSDP1's
    summon_full_params) falls inside the pass."""

    def make(original: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            keys, grid = session.pending
            session.pending = (None, None)
            root = session.roots[0]
            early = getattr(root, "_supports_mm_encoder_outputs", None)
            with session.lockstep.vision_pass(
                "generation",
                session.visuals[0],
                0,
                media=media_calls(kwargs),
                join_in_forward=not (callable(early) and early()),
                keys=keys,
                grid=grid,
            ):
                return original(*args, **kwargs)

        return call

    return make


def _generate_single_turn(session: Session, trainer: Any) -> Callable[[Callable], Callable]:
    """The generation's batch: its images' keys for the generate call inside."""

    def make(original: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            a = _bound(original, args, kwargs)
            images, fields = a["images"], a["multimodal_fields"] or {}
            keys = None
            # Tool calls generate again on some rows with the tools' images: hash those.
            if not getattr(trainer, "tools", None) and session.row_groups is not None and images is not None:
                if len(a["prompt_ids"]) == len(session.row_groups):
                    keys = image_keys(session.row_groups, [len(x or []) for x in images])
            session.pending = (keys, fields.get("image_grid_thw"))
            try:
                return original(*args, **kwargs)
            finally:
                session.pending = (None, None)

        return call

    return make


def _logps(session: Session) -> Callable[[Callable], Callable]:
    """The log-prob passes (old and reference, without gradients) and the loss's (with them):
    every forward of the model is a vision slot."""

    def make(original: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            a = _bound(original, args, kwargs)
            index = session.model_index(a["model"])
            if index is None:  # a model frameshard does not shard
                return original(*args, **kwargs)
            groups = session.row_groups
            if groups is not None and len(groups) != int(a["input_ids"].shape[0]):
                groups = None
            name = "loss" if torch.is_grad_enabled() else "log-prob"
            keys = image_keys(groups, a["num_images"])
            with session.lockstep.vision_pass(
                name, session.visuals[index], index, outer=a["model"], keys=keys, grid=a["image_grid_thw"]
            ):
                return original(*args, **kwargs)

        return call

    return make


def _compute_loss(session: Session) -> Callable[[Callable], Callable]:
    def make(original: Callable) -> Callable:
        def call(model: Any, inputs: dict, *args: Any, **kwargs: Any) -> Any:
            groups = inputs.get(GROUPS_KEY)
            session.row_groups = groups.tolist() if groups is not None else None
            try:
                return original(model, inputs, *args, **kwargs)
            finally:
                session.row_groups = None

        return call

    return make


def _counted(session: Session, trainer: Any, mode: str) -> Callable[[Callable], Callable]:
    """training_step (mode "train": metrics once per optimizer step, as TRL's step_time) or
    prediction_step ("eval": once per batch)."""

    def make(original: Callable) -> Callable:
        def call(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            session.step += session.lockstep.take_counts()
            if mode == "eval" or trainer._step % trainer.current_gradient_accumulation_steps == 0:
                log_counts(trainer, mode, session.step, session.lockstep.world)
                session.step = Counts()
            return out

        return call

    return make


def log_counts(trainer: Any, mode: str, counts: Counts, world: int) -> None:
    """Into TRL's metrics (averaged over the logging window, shown in the user's tracker) and the
    frameshard logger."""
    if counts.calls == 0:
        return
    metrics = trainer._metrics[mode]
    for name, value in (
        ("vision_frames_total", counts.frames),
        ("vision_frames_distinct", counts.frames_distinct),
        ("vision_rows_total", counts.rows),
        ("vision_rows_distinct", counts.rows_distinct),
    ):
        metrics["frameshard/" + name].append(float(value))
    _LOG.info(
        "frameshard: %s step %d: the vision towers of %d processes encoded %d of %d patch rows (%d of %d frames) "
        "in %d calls",
        mode,
        int(getattr(trainer.state, "global_step", 0)),
        world,
        counts.rows_distinct,
        counts.rows,
        counts.frames_distinct,
        counts.frames,
        counts.calls,
    )


def _holder(root: torch.nn.Module, visual: torch.nn.Module) -> torch.nn.Module:
    """The module whose forward calls `visual` (the one holding it as `.visual`)."""
    for module in root.modules():
        if module._modules.get("visual") is visual:
            return module
    return root


def install(trainer: Any, session: Session) -> None:
    """Wraps the trainer's methods and the policy's `generate` (see the module docstring), and
    hooks the forward of every enabled model's module that calls its vision module."""
    for root, visual in zip(session.roots, session.visuals, strict=True):
        holder = _holder(root, visual)
        session.hooks += [
            holder.register_forward_pre_hook(session.lockstep.join_hook, with_kwargs=True),
            holder.register_forward_hook(session.lockstep.zero_hook, with_kwargs=True),
        ]
    patches = [
        _patches.wrapped(trainer, "_generate_and_score_completions", _generate_and_score(session, trainer)),
        _patches.wrapped(trainer, "_generate_single_turn", _generate_single_turn(session, trainer)),
        _patches.wrapped(trainer, "_get_per_token_logps_and_entropies", _logps(session)),
        _patches.wrapped(trainer, "compute_loss", _compute_loss(session)),
        _patches.wrapped(trainer, "training_step", _counted(session, trainer, "train")),
        _patches.wrapped(trainer, "prediction_step", _counted(session, trainer, "eval")),
        _patches.wrapped(session.roots[0], "generate", _generate(session)),
    ]
    _patches.install(trainer, OWNER, session, patches)


def remove(trainer: Any) -> Session | None:
    """Undoes `install`; the session it removed, or None."""
    session = _patches.uninstall(trainer, OWNER)
    if session is None:
        return None
    return session
