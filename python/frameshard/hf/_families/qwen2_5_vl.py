"""Qwen2.5-VL: window attention except in `fullatt_block_indexes`, a SwiGLU MLP, one merger.

Split frames: only the full-attention blocks exchange keys and values; a piece holds whole
window rows (the plan cuts there: the tower's own dims give it the window), so its windows are
the whole frame's windows of those rows and the window blocks stay local.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..._C import FrameshardError
from ..._towers import TowerDims, config_value
from .._family import Family, RandomModels, Split, register, tiny_vision_sizes, tower_kwargs


def _window_side(c: Any) -> int:
    """Patch rows per window side: merged tokens per window side times the merge (as transformers)."""
    merge = int(config_value(c, "spatial_merge_size", 2))
    return int(config_value(c, "window_size", 112)) // merge // int(config_value(c, "patch_size", 14)) * merge


def dims(c: Any) -> TowerDims:
    depth = int(config_value(c, "depth"))
    side = _window_side(c)
    full = sorted({int(i) for i in config_value(c, "fullatt_block_indexes", []) if 0 <= int(i) < depth})
    return TowerDims(
        name="qwen2.5-vl",
        depth=depth,
        hidden=int(config_value(c, "hidden_size")),
        intermediate=int(config_value(c, "intermediate_size")),
        gated_mlp=True,
        window_patches=side * side,
        full_attention_layers=tuple(full),
        mergers=1,
        merge_size=int(config_value(c, "spatial_merge_size", 2)),
        out_hidden=int(config_value(c, "out_hidden_size")),
    )


def full_attention_blocks(visual: torch.nn.Module) -> list[int]:
    depth = len(visual.blocks)
    return sorted({int(i) for i in visual.fullatt_block_indexes if 0 <= int(i) < depth})


def _window_grid(visual: torch.nn.Module, grid: torch.Tensor, pieces: Sequence[Any]) -> torch.Tensor:
    """`grid` with each piece frame replaced by the band of whole window rows it holds,
    (1, rows / w, w). Raises unless each piece holds whole window rows."""
    side = _window_side(visual.config)
    by_frame = {int(p.frame): p for p in pieces}
    rows, frame = [], 0
    for t, h, w in grid.tolist():
        for _ in range(int(t)):
            p = by_frame.get(frame)
            if p is None:
                rows.append([1, h, w])
            else:
                band = side * w
                if p.begin % band or (p.end % band and p.end != h * w):
                    raise FrameshardError(
                        "frameshard.hf: expected the piece of local frame %d to hold whole window "
                        "rows (rows multiples of %d = window side %d x w %d; plan with the tower's "
                        "own dims, hf.enable does), got rows [%d, %d)" % (frame, band, side, w, p.begin, p.end)
                    )
                rows.append([1, (p.end - p.begin) // w, w])
            frame += 1
    return torch.tensor(rows, dtype=grid.dtype, device=grid.device)


def geometry(visual: torch.nn.Module, grid: torch.Tensor, pieces: Sequence[Any], local: torch.Tensor) -> dict:
    from transformers import vision_utils  # noqa: PLC0415  (transformers is optional)

    index, cu_window = vision_utils.get_vision_window_index(
        _window_grid(visual, grid, pieces),
        int(visual.spatial_merge_size),
        int(visual.window_size),
        int(visual.patch_size),
    )
    return {"window_index": index, "cu_window_seqlens": cu_window}


def random_tower(width: int, depth: int, heads: int, mlp: int, out: int) -> dict:
    return tower_kwargs(width, depth, heads, mlp, out, fullatt_block_indexes=[depth - 1])


def tiny_model(vision: dict, text: dict, recipe: dict) -> None:
    tiny_vision_sizes(vision, text)
    patch, merge = vision["patch_size"], vision["spatial_merge_size"]
    vision.update(window_size=4 * patch * merge, fullatt_block_indexes=[vision["depth"] - 1])


QWEN2_5_VL = register(
    Family(
        name="qwen2_5_vl",
        module="qwen2_5_vl",
        model_types=("qwen2_5_vl",),
        dims=dims,
        vision=("Qwen2_5_VisionTransformerPretrainedModel",),
        text=("Qwen2_5_VLTextModel",),
        split=Split(
            helpers=("get_vision_position_ids", "get_vision_attention_seqlens", "get_vision_window_index"),
            kwargs=("position_ids", "cu_seqlens", "window_index", "cu_window_seqlens"),
            full_attention_blocks=full_attention_blocks,
            geometry=geometry,
        ),
        random_models=RandomModels(
            "Qwen2_5_VLVisionConfig",
            random_tower,
            ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration"),
            tiny_model,
        ),
    )
)
