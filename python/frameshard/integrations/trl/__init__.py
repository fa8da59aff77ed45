"""frameshard inside TRL: one call after the trainer is built.

Fine-tuning with context parallelism (TRL's SFTTrainer, or a plain transformers Trainer):

    trainer = trl.SFTTrainer(model=..., args=SFTConfig(...), train_dataset=..., processing_class=processor)
    fs_trl.enable(trainer, frameshard.FrameShardingConfig(enabled=True, gather="owner"), cp_size=2)
    trainer.train()                 # W processes: a dp x cp mesh of W/2 x 2

Each CP group of `cp_size` processes trains one batch: the language model runs 1/cp of its
sequence on each (hf.context_parallel), the tower 1/cp of its frames (hf.enable), and the loss,
gradients, logs, checkpoints and evaluation are those of the run on W/cp processes without CP
(integrations/_cp_trainer.py; docs/python-trl-sft.md).

GRPO (TRL's GRPOTrainer):

    import frameshard
    from frameshard.integrations import trl as fs_trl
    trainer = trl.GRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=...,
                              processing_class=processor)
    fs_trl.enable(trainer)          # None: grpo_config(), the defaults that suit GRPO
    trainer.train()                 # (accelerate launch / torchrun: every process calls enable)
    fs_trl.disable(trainer)         # undoes it

GRPOTrainer samples every prompt G times, and its processor repeats the prompt's images with it,
within and across processes; each of its vision passes -- the generation's prefill, the old and
reference log-probs, the loss's forward and backward -- encodes every copy. With `enable`, each
pass encodes each distinct image once across all processes (frameshard's dedup over a dp x 1
mesh of the trainer's processes) and routes its rows to every use; gradients are summed over the
uses, so losses and gradients are those of the run without it. The copies are known from the
trainer's prompt groups (`keys="groups"`: nothing is hashed); `keys="pixels"` hashes the pixel
rows instead (a dataset whose transform draws a different image for each copy of a prompt).

Every vision call is collective, so the processes' calls are lined up pass by pass
(integrations/_lockstep.py): a process whose batch has no image joins the others' calls, and
processes in different passes, or one that failed, raise the same FrameshardError on every
process. What was encoded is logged each step ("frameshard" logger) and put into TRL's metrics:
`frameshard/vision_rows_total`, `frameshard/vision_rows_distinct`, `frameshard/vision_frames_total`,
`frameshard/vision_frames_distinct`. See docs/trl.md.
"""

from __future__ import annotations

import dataclasses as _dataclasses
import logging as _logging
from typing import Any as _Any

from ... import _unwrap
from ... import hf as _hf
from ..._C import FrameshardError
from ..._config import FrameShardingConfig as _Config
from ...hf import _enable, _patches, _vision
from .. import _accelerate, _cp_trainer
from .._lockstep import Lockstep as _Lockstep
from . import _compat, _grpo
from ._compat import SUPPORTED_TRL

_LOG = _logging.getLogger("frameshard")
_FN = "frameshard.integrations.trl.enable"
KEYS = ("groups", "pixels")


def grpo_config() -> _Config:
    """The defaults of `enable(trainer, None)`: sharding and dedup on, over the dp x cp mesh of
    the trainer's processes, with no thresholds (every call pools the processes' images, however
    few: the copies of a prompt group are spread over processes) and no floor frames (every row a
    tower encodes is a real one)."""
    return _Config(enabled=True, dedup=True, mesh_dims=["dp", "cp"], min_tokens=0, min_frames=0, min_local_patch_rows=0)


def _is_grpo(trainer: _Any) -> bool:
    try:
        from trl import GRPOTrainer  # noqa: PLC0415  (trl is an optional extra)
    except ImportError:
        return False
    return isinstance(trainer, GRPOTrainer)


def _config(config: _Config | None) -> _Config:
    if config is None:
        return grpo_config()
    if not isinstance(config, _Config):
        raise FrameshardError(
            "%s: expected config a frameshard.FrameShardingConfig or None, got %s" % (_FN, type(config).__name__)
        )
    if config.gather != "all":
        raise FrameshardError(
            "%s: distributed.multimodal.vision.frame_sharding.gather: expected 'all' (owner routing needs "
            "the language model under hf.context_parallel), got %r" % (_FN, config.gather)
        )
    if list(config.mesh_dims) != ["dp", "cp"]:
        # The processes hold different batches: the calls pool them over the dp x cp mesh.
        _LOG.info(
            "%s: mesh_dims %s -> ['dp', 'cp'] (the trainer's processes hold different batches)", _FN, config.mesh_dims
        )
        config = _dataclasses.replace(config, mesh_dims=["dp", "cp"])
    return config


def enable(trainer: _Any, config: _Config | None = None, *, keys: str = "groups", cp_size: int = 1) -> _Any:
    """A transformers Trainer (TRL's SFTTrainer or another; not a GRPOTrainer) with `cp_size` > 1:
    context parallelism over CP groups of `cp_size` processes (the module's docstring); `config`
    None is `_cp_trainer.cp_config()` (frame sharding, gather "owner"); cp_size 1 changes nothing.

    A trl.GRPOTrainer (built, not yet training; cp_size 1): makes every vision pass encode each
    distinct image once across all its processes; returns the trainer. `config` None is
    `grpo_config()`; another config is taken with mesh_dims ["dp", "cp"] (the processes hold
    different batches) and its thresholds as they are (below them a call encodes each process's
    own images, deduplicated on the process). `keys`: "groups" (the trainer's prompt groups) or
    "pixels" (a hash of each frame's pixel rows). Collective: every process calls it (it creates
    frameshard's process group). Calling it again replaces the config."""
    _compat.check_trl(_FN)
    if isinstance(cp_size, bool) or not isinstance(cp_size, int) or cp_size < 1:
        raise FrameshardError("%s: cp_size: expected an int >= 1, got %r" % (_FN, cp_size))
    if not _is_grpo(trainer):
        return _enable_cp(trainer, config, cp_size)
    if cp_size != 1:
        raise FrameshardError(
            "%s: cp_size: expected 1 for a GRPOTrainer (its generation has no CP), got %d" % (_FN, cp_size)
        )
    return _enable_grpo(trainer, config, keys)


def _enable_grpo(trainer: _Any, config: _Config | None, keys: str) -> _Any:
    disable(trainer)  # a previous enable's wrappers would hide the trainer's own methods
    missing = _compat.missing_grpo_features(trainer)
    if missing:
        raise FrameshardError(
            "%s: expected TRL's GRPOTrainer as of trl %s, got trl %s without %s"
            % (_FN, SUPPORTED_TRL, _compat.trl_version(), ", ".join(missing))
        )
    if keys not in KEYS:
        raise FrameshardError("%s: keys: expected one of %s, got %r" % (_FN, ", ".join(KEYS), keys))
    config = _config(config)
    mesh, device = _accelerate.mesh_of(trainer.accelerator, _FN)
    models = [trainer.model] + ([trainer.ref_model] if getattr(trainer, "ref_model", None) is not None else [])
    lockstep = _Lockstep(mesh.group, device, "frameshard.integrations.trl")
    for model in models:
        if _enable.find(model).features is not None:
            raise FrameshardError(
                "%s: expected a model sharded at its vision module (Qwen2-VL, Qwen2.5-VL, Qwen3-VL(-MoE), "
                "Qwen3.5(-MoE), GLM-4.1V/4.5V), got %s (sharded at get_image_features, over one CP group only)"
                % (_FN, _unwrap.describe(model))
            )
    visuals = []
    try:
        for model in models:
            visual = _hf.enable(model, mesh, config)
            _patches.state(visual, _vision.OWNER).calls = lockstep
            visuals.append(visual)
    except BaseException:
        for model in models[: len(visuals)]:
            _hf.disable(model)
        raise
    session = _grpo.Session(
        lockstep=lockstep,
        keys=keys,
        roots=[_unwrap.unwrap_module(m) for m in models],
        visuals=visuals,
        hooks=[],
    )
    _grpo.install(trainer, session)
    _LOG.info(
        "%s: %d process(es), keys %s, dedup %s, thresholds min_tokens %d / min_frames %d",
        _FN,
        mesh.dp,
        keys,
        config.dedup,
        config.min_tokens,
        config.min_frames,
    )
    return trainer


def _enable_cp(trainer: _Any, config: _Config | None, cp_size: int) -> _Any:
    from transformers import Trainer  # noqa: PLC0415  (transformers is a dependency of trl)

    if not isinstance(trainer, Trainer):
        raise FrameshardError(
            "%s: expected a trl.GRPOTrainer or a transformers Trainer (trl.SFTTrainer), got %s"
            % (_FN, type(trainer).__name__)
        )
    disable(trainer)
    if cp_size == 1:
        _LOG.info("%s: cp_size 1: nothing to divide, the trainer runs as it is", _FN)
        return trainer
    _cp_trainer.install(trainer, config, cp_size, _FN)
    return trainer


def disable(trainer: _Any) -> bool:
    """Undoes `enable` (the trainer's methods, the forward hooks, hf.enable and
    hf.context_parallel on its models); False if it was not enabled."""
    if _cp_trainer.remove(trainer) is not None:
        return True
    session = _grpo.remove(trainer)
    if session is None:
        return False
    for root in session.roots:
        _hf.disable(root)
    return True


def is_enabled(trainer: _Any) -> bool:
    """Whether `enable` is in force on the trainer."""
    return any(_patches.state(trainer, owner) is not None for owner in (_grpo.OWNER, _cp_trainer.OWNER))


__all__ = ["KEYS", "SUPPORTED_TRL", "disable", "enable", "grpo_config", "is_enabled"]
