"""Which transformers releases frameshard.hf supports, and feature detection of what it patches.

The supported range is declared once, here (pyproject.toml's `hf` extra states the same); a
release outside it is refused at `enable` / `context_parallel` by name, never inside the tower.
Within the range, the attributes and signatures each patch relies on are checked at `enable`,
and a missing one is named (a release inside the range that changed them is reported, not run).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

from .._C import FrameshardError

# A specifier as pip writes it (pyproject.toml's `hf` extra is "transformers" + this), read here as
# [lowest supported, first unsupported) by `bounds`. 5.15 is where every family's vision module takes all of
# its precomputed geometry through transformers.vision_utils (get_vision_attention_seqlens and the
# interpolated position tables came then; 5.0 returns pooler_output, 4.x a tensor); 5.17.0 is the
# lowest CI tests (the release the project's GPU machine carries). Nemotron Omni exists from 5.18.
# The upper bound is the next major release: within it, feature detection (below) names what a
# release changed. CI runs the parity subset on 5.17.0, 5.18.0 (NeMo Automodel's pin) and 5.25.0,
# the full suites on the pinned 5.24.0 (docs/python.md, "Supported transformers releases").
SUPPORTED_TRANSFORMERS = ">=5.17.0,<6"


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():  # 5.26.0rc1 / 5.26.0.dev0: compare the release part only
            break
    return tuple(parts)


def bounds(spec: str = SUPPORTED_TRANSFORMERS) -> tuple[str, str]:
    """(lowest supported, first unsupported) of a ">=LOW,<HIGH" specifier."""
    low, _, high = (c.strip() for c in spec.partition(","))
    if not (low.startswith(">=") and high.startswith("<") and not high.startswith("<=")):
        raise ValueError("frameshard.hf: expected a range '>=LOW,<HIGH', got %r" % spec)
    return low[2:], high[1:]


def oldest_transformers() -> str:
    """The oldest transformers release frameshard.hf supports."""
    return bounds()[0]


def transformers_version() -> str:
    import transformers  # noqa: PLC0415  (transformers is optional)

    return str(transformers.__version__)


def supported(version: str) -> bool:
    """Whether transformers `version` lies in SUPPORTED_TRANSFORMERS."""
    low, high = (_version_tuple(v) for v in bounds())
    return low <= _version_tuple(version) < high


def check_transformers(fn: str) -> None:
    """FrameshardError naming the installed and supported releases when outside the range."""
    version = transformers_version()
    if not supported(version):
        raise FrameshardError(
            "frameshard.hf.%s: expected transformers %s (the releases frameshard.hf supports), "
            "got transformers %s" % (fn, SUPPORTED_TRANSFORMERS, version)
        )


def modeling_module(module: Any) -> Any:
    """The transformers modeling module that defines `module`'s transformers class."""
    for cls in type(module).__mro__:
        if cls.__module__.startswith("transformers."):
            return sys.modules.get(cls.__module__)
    return None


def _takes(fn: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def missing_split_features(visual: Any, helpers: tuple[str, ...], blocks: list[int]) -> list[str]:
    """What split frames rely on that `visual` (a vision module) lacks: the vision_utils helpers
    (with a `kwargs` parameter: precomputed geometry) called by its modeling module, and per
    full-attention block an attention with qkv / proj / num_heads / scaling / config next to
    apply_rotary_pos_emb_vision and transformers' attention interface."""
    try:
        from transformers import vision_utils  # noqa: PLC0415
    except ImportError:
        return ["transformers.vision_utils"]
    missing = []
    module = modeling_module(visual)
    for name in helpers:
        helper = getattr(vision_utils, name, None)
        if helper is None or not _takes(helper, "kwargs"):
            missing.append("transformers.vision_utils.%s(..., kwargs=)" % name)
        elif getattr(module, name, None) is not helper:
            missing.append("%s calling vision_utils.%s" % (getattr(module, "__name__", "its module"), name))
    for i in blocks:
        attn = getattr(visual.blocks[i], "attn", None)
        absent = [f for f in ("qkv", "proj", "num_heads", "scaling", "config") if not hasattr(attn, f)]
        if attn is None or absent:
            missing.append("blocks[%d].attn.%s" % (i, ", ".join(absent or ["(none)"])))
            continue
        attn_module = modeling_module(attn)
        for name in ("apply_rotary_pos_emb_vision", "ALL_ATTENTION_FUNCTIONS", "eager_attention_forward"):
            if not hasattr(attn_module, name):
                missing.append("%s.%s" % (getattr(attn_module, "__name__", "its module"), name))
    return sorted(set(missing))


def missing_cp_features() -> list[str]:
    """What context_parallel relies on that the installed transformers lacks."""
    try:
        from transformers import AttentionInterface  # noqa: PLC0415
    except ImportError:
        return ["transformers.AttentionInterface"]
    return [] if callable(getattr(AttentionInterface, "register", None)) else ["AttentionInterface.register"]


def cache_name(forward: Any, names: tuple[str, str]) -> str:
    """The name `forward` gives its KV cache parameter: transformers 5.24 renamed
    past_key_values / cache_params to cache (the old names accepted until 5.40)."""
    params = inspect.signature(forward).parameters
    return next((n for n in names if n in params), names[0])
