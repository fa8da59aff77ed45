"""Which TRL releases frameshard.integrations.trl supports, and feature detection of what it wraps.

The range is declared once, here (pyproject.toml's `trl` extra states the same); a release
outside it is refused at `enable` by name. Within it, the trainer methods the integration wraps
and the parameters it reads are checked at `enable`, and what a release changed is named instead
of failing inside a training step.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..._C import FrameshardError

# [lowest supported, first unsupported): 1.16.0 is the release CI pins and tests (its GRPOTrainer
# generates through _generate / _generate_single_turn and scores through
# _get_per_token_logps_and_entropies); the next major release may change all of it.
SUPPORTED_TRL = ">=1.16.0,<2"

# GRPOTrainer methods the integration wraps -> the parameters it reads from their calls.
GRPO_METHODS = {
    "_generate_and_score_completions": ("inputs",),
    "_generate_single_turn": ("prompt_ids", "images", "multimodal_fields"),
    "_get_per_token_logps_and_entropies": ("model", "input_ids", "image_grid_thw", "num_images"),
    "compute_loss": ("model", "inputs"),
    "training_step": ("model", "inputs"),
    "prediction_step": ("model", "inputs"),
}
GRPO_ATTRIBUTES = ("accelerator", "num_generations", "_metrics", "_step")


def trl_version() -> str:
    import trl  # noqa: PLC0415  (trl is an optional extra)

    return str(trl.__version__)


def check_trl(fn: str) -> None:
    """FrameshardError naming the installed release and the supported range when outside it."""
    from packaging.specifiers import SpecifierSet  # noqa: PLC0415  (transformers' dependency)
    from packaging.version import Version  # noqa: PLC0415

    version = trl_version()
    if not SpecifierSet(SUPPORTED_TRL).contains(Version(version), prereleases=True):
        raise FrameshardError(
            "%s: expected trl %s (the releases frameshard.integrations.trl supports), got trl %s"
            % (fn, SUPPORTED_TRL, version)
        )


def missing_grpo_features(trainer: Any) -> list[str]:
    """What the integration wraps or reads that `trainer` (a GRPOTrainer) lacks."""
    missing = []
    for name, params in GRPO_METHODS.items():
        method = getattr(trainer, name, None)
        if not callable(method):
            missing.append("GRPOTrainer.%s" % name)
            continue
        try:
            have = inspect.signature(method).parameters
        except (TypeError, ValueError):
            missing.append("GRPOTrainer.%s (no signature)" % name)
            continue
        missing += ["GRPOTrainer.%s(%s=)" % (name, p) for p in params if p not in have]
    missing += ["GRPOTrainer.%s" % a for a in GRPO_ATTRIBUTES if not hasattr(trainer, a)]
    return missing
