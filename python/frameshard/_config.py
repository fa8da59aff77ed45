"""`FrameShardingConfig`: the frame-sharding keys of the YAML schema, validated by the C++ core.

The fields, defaults and error messages are those of the YAML key
`distributed.multimodal.vision.frame_sharding` (NeMo Automodel's schema plus frameshard's own
`partitioner`, `gather`, `split_frames`, `tower`, `policy`, `gather_bandwidth_gbps` and `dedup`): every field
is applied to the defaults as a dotted override by the
C++ config code, so a bad value raises exactly the message a YAML file would, e.g.

    frameshard::config: distributed.multimodal.vision.frame_sharding.min_tokens:
    expected a non-negative integer, got true
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any

from . import _C

FRAME_SHARDING_PATH = "distributed.multimodal.vision.frame_sharding"


# Strings YAML reads back as the same plain string: written unquoted, as a YAML file would have
# them, so error messages quote them exactly as they quote a file's values.
_PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:,+ -]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"}


def _yaml_value(value: Any) -> str:
    """A Python value as the YAML text a config file would hold for it."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    if isinstance(value, str):
        plain = _PLAIN.match(value) and value.lower() not in _YAML_WORDS and value == value.strip()
        return value if plain else json.dumps(value)
    try:
        return json.dumps(value)  # bool -> true/false, numbers as written
    except TypeError:
        return str(value)


@dataclasses.dataclass
class FrameShardingConfig:
    """Vision frame sharding options (YAML: `distributed.multimodal.vision.frame_sharding`).

    Attributes:
        enabled: shard at all (the YAML default is False: the replicated path).
        mesh_dims: the mesh dimensions the sharding group spans: ["cp"], or ["dp", "cp"] to
            balance every DP replica's frames over the whole mesh (shard_vision / hf.enable
            then need mesh=frameshard.Mesh(...)).
        min_tokens: shard when the merged visual tokens reach this many ...
        min_frames: ... or the frame units reach this many (either is enough).
        min_local_patch_rows: pad each rank's frames to at least this many patch rows with
            zero frames (dropped before the gather); 0 turns it off.
        cost_alpha: the per-frame cost model: "auto", "online", a number >= 0, a tower preset,
            "automodel", "automodel:<preset>", "quadratic:a,b,c" or the path of a
            `frameshard calibrate` file. "online" starts as "auto" and, from the third call,
            plans with a fit of the run's own tower times (frameshard.online_costs()).
        partitioner: "optimal" (exact contiguous), "greedy", "count" or "lpt".
        gather: "all" (every rank receives every visual row) or "owner" (each row goes only to
            the rank whose sequence shard uses it; shard_vision then needs token_owner).
        split_frames: let the optimal partitioner cut frames larger than a rank's share into
            pieces across ranks (plan() reports them; shard_vision needs a tower that takes
            pieces, and hf.enable patches the transformers Qwen-VL / GLM-4V towers to).
        split_exchange_cost: units of the tower's FLOP model per key/value row a piece receives
            (integer >= 0; with a calibrated cost_alpha the plan converts it to seconds).
        split_min_gain: cut frames only when that lowers the modelled slowest rank by at least
            this fraction, [0, 1), after split_exchange_latency_us is paid.
        split_exchange_latency_us: fixed latency of one key/value exchange (one full-attention
            layer, forward + backward) in microseconds, >= 0: a split plan pays it on every rank
            once per full-attention layer. Default 50 (NCCL inside a node, a guess); measure
            yours with frameshard.calibrate_exchange.
        tower: the tower whose FLOPs "auto" counts (e.g. "qwen3-vl").
        policy: "threshold" (min_tokens / min_frames) or "auto" (shard when the predicted
            vision saving exceeds the predicted gather time).
        gather_bandwidth_gbps: the auto policy's gather bandwidth into a rank, GB/s (> 0).
        dedup: encode each distinct frame once in the group (the whole mesh with
            mesh_dims ["dp", "cp"]): frames are keyed by a 128-bit hash of their pixel rows (or
            the caller's media_keys) and every use receives its frame's rows; gradients sum
            over the uses (exact for the deterministic Qwen / GLM / RADIO towers).
        mesh_min_gain: with mesh_dims ["dp", "cp"] and policy "auto", each call pools the
            replicas' frames over the mesh only when the prediction saves this share of the
            CP-only plan's vision time (each replica's frames over its own CP ranks), [0, 1).

    Construction validates every field (FrameshardError with the YAML message).
    """

    enabled: bool = False
    mesh_dims: list[str] = dataclasses.field(default_factory=lambda: ["cp"])
    min_tokens: int = 2048
    min_frames: int = 32
    min_local_patch_rows: int = 96
    cost_alpha: str | float = "auto"
    partitioner: str = "optimal"
    gather: str = "all"
    split_frames: bool = False
    split_exchange_cost: int = 1000
    split_min_gain: float = 0.05
    split_exchange_latency_us: float = 50.0
    tower: str = "qwen3-vl"
    policy: str = "threshold"
    gather_bandwidth_gbps: float = 25.0
    dedup: bool = False
    mesh_min_gain: float = 0.05

    def __post_init__(self) -> None:
        _C.make_config(self.overrides(), 1)

    def overrides(self) -> list[tuple[str, str]]:
        """Dotted (key, YAML value) pairs that turn the schema defaults into this config."""
        return [
            ("%s.%s" % (FRAME_SHARDING_PATH, f.name), _yaml_value(getattr(self, f.name)))
            for f in dataclasses.fields(self)
        ]

    def to_yaml(self, cp_size: int = 1) -> str:
        """The YAML text of this config under `distributed` (with `cp_size`)."""
        return _C.to_yaml(self.overrides(), cp_size)

    @classmethod
    def from_yaml(cls, yaml_text: str, source: str = "") -> FrameShardingConfig:
        """The frame-sharding part of a YAML text (the whole schema is validated)."""
        return parse_yaml(yaml_text, source)[1]

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> FrameShardingConfig:
        """The frame-sharding part of a YAML file."""
        with open(path, encoding="utf-8") as f:
            return cls.from_yaml(f.read(), os.fspath(path))


def parse_yaml(yaml_text: str, source: str = "") -> tuple[int, FrameShardingConfig]:
    """(distributed.cp_size, FrameShardingConfig) of a YAML text, validated by the C++ core."""
    cp_size, fields = _C.parse_config(yaml_text, source)
    return int(cp_size), FrameShardingConfig(**fields)
