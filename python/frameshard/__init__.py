"""frameshard: context-parallel vision frame sharding for VLM training.

Instead of every context-parallel (CP) rank running the vision tower on every image and video
frame, frameshard partitions the frames across the CP ranks (an exact optimal contiguous
partition by estimated cost), runs the tower once per rank on its own frames, and gathers the
outputs back with a differentiable variable-size all-gather (backward: reduce-scatter-v sum).

    import frameshard
    cfg = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0)
    p = frameshard.plan([[1, 32, 32], [8, 16, 16]], cp_size=2, config=cfg)
    embeds = frameshard.shard_vision(tower, pixel_values, grid_thw, group, cfg)
    frameshard.hf.enable(model, group, cfg)   # a transformers VLM; group may be a DeviceMesh
    # mesh_dims [dp, cp]: every replica's frames balanced over the dp x cp mesh
    mesh = init_device_mesh("cuda", (dp, cp), mesh_dim_names=("dp", "cp"))
    cfg = frameshard.FrameShardingConfig(enabled=True, mesh_dims=["dp", "cp"])
    embeds = frameshard.shard_vision(tower, my_pixels, my_grid, mesh, cfg)

`torch` is imported first: the extension frameshard._C shares torch's pybind11 types.
"""

import logging

import torch  # must be loaded before the extension

from . import _C
from ._C import FrameshardError
from ._calibrate import Calibration, calibrate
from ._calibrate_exchange import calibrate_exchange
from ._config import FrameShardingConfig, parse_yaml
from ._groups import Mesh
from ._online import OnlineCostState, online_costs, write_online_cost
from ._plan import DedupCounts, FrameUnit, MeshChoice, Plan, RankPlan, plan, workload
from ._shard import (
    FramePiece,
    PieceTower,
    Tower,
    TowerGeometry,
    all_gather_rows,
    frame_keys,
    shard_vision,
    visual_token_owners,
)
from ._shutdown import shut_down
from ._towers import TowerDims, cost_model, tower_dims

# The path each sharded call takes is logged here (INFO, once per change); silent unless the
# application configures logging.
logging.getLogger("frameshard").addHandler(logging.NullHandler())

# The CMake project version, compiled into the extension (pyproject.toml reads the same).
__version__ = _C.build_info()["version"]


def build_info() -> dict:
    """What this build is: frameshard's version and git revision, the torch it was compiled
    against and the one running, whether the CUDA paths and C++ group creation (NCCL, Gloo) are
    compiled in (`frameshard --version` prints the same for the CLI; the pip-built extension
    creates no groups: it runs on the torch.distributed groups it is given, whose backends
    `distributed_backends` lists). `text` holds the printable form."""
    info = dict(_C.build_info())
    info["torch_runtime"] = torch.__version__
    info["cuda_available"] = bool(torch.cuda.is_available())
    # The collectives run on the torch.distributed groups they are given: these backends.
    dist = torch.distributed
    info["distributed_backends"] = [
        name
        for name, available in (
            ("gloo", dist.is_available() and dist.is_gloo_available()),
            ("nccl", dist.is_available() and dist.is_nccl_available()),
        )
        if available
    ]
    info["text"] = info["text"] + (
        "torch at run time: %s (CUDA available: %s; torch.distributed groups: %s)\n"
        % (
            info["torch_runtime"],
            "yes" if info["cuda_available"] else "no",
            ", ".join(info["distributed_backends"]) or "none",
        )
    )
    return info


if _C.torch_version != torch.__version__:
    raise ImportError(
        "frameshard: expected torch %s (the torch the extension was built against), got %s; "
        "reinstall with `python -m pip install --no-build-isolation .`" % (_C.torch_version, torch.__version__)
    )

from . import hf  # noqa: E402  (after the version check; it registers the families' readers)

__all__ = [
    "Calibration",
    "DedupCounts",
    "MeshChoice",
    "FrameShardingConfig",
    "FramePiece",
    "FrameUnit",
    "FrameshardError",
    "Mesh",
    "OnlineCostState",
    "PieceTower",
    "Plan",
    "RankPlan",
    "Tower",
    "TowerDims",
    "TowerGeometry",
    "all_gather_rows",
    "build_info",
    "calibrate",
    "calibrate_exchange",
    "cost_model",
    "frame_keys",
    "hf",
    "online_costs",
    "parse_yaml",
    "plan",
    "shard_vision",
    "shut_down",
    "tower_dims",
    "visual_token_owners",
    "workload",
    "write_online_cost",
]
