"""`frameshard analyze`'s media rules against transformers' own Qwen-VL processors.

Writes a manifest of random image sizes and videos (frame counts, fps, sizes), runs

    <frameshard> analyze M.jsonl --family F --emit-grids

and requires every grid_thw row to equal what the processors of transformers compute: their
`smart_resize` functions and `sample_frames` methods, taken from the installed transformers'
source (the modules import torchvision at the top, which the venv does not need otherwise, so
the functions are compiled from their own source text, unchanged). The video processors'
defaults (size, patch, frame limits) are read from the same classes, so a change upstream fails
here too. Image limits are the released checkpoints' preprocessor_config.json values.

Environment: FRAMESHARD_BIN (default: <repo>/build/frameshard).
Run: `.venv/bin/python -m pytest tests/python/test_media_resize.py`, or through ctest
(tests/cli/media_resize_test.sh).
"""

import ast
import importlib.util
import json
import math
import os
import pathlib
import random
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("FRAMESHARD_BIN", str(ROOT / "build" / "frameshard"))
MODELS = pathlib.Path(importlib.util.find_spec("transformers").origin).parent / "models"


def _tree(rel):
    return ast.parse((MODELS / rel).read_text())


def _compile(node, rel):
    """A function from transformers' source, annotations dropped (their types are not imported)."""
    for a in node.args.args + node.args.kwonlyargs:
        a.annotation = None
    node.returns = None
    ns = {"math": math, "np": np, "torch": torch, "logger": SimpleNamespace(warning_once=print)}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(MODELS / rel), "exec"), ns)
    return ns[node.name]


def function(rel, name):
    return _compile(next(n for n in _tree(rel).body if isinstance(n, ast.FunctionDef) and n.name == name), rel)


def cls(rel, name):
    """(methods, class attributes) of a class in transformers' source."""
    c = next(n for n in _tree(rel).body if isinstance(n, ast.ClassDef) and n.name == name)
    attrs = {}
    for n in c.body:
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name):
            try:
                attrs[n.targets[0].id] = eval(compile(ast.Expression(n.value), rel, "eval"), {})
            except Exception:  # names of other modules: not needed here
                pass
    methods = {n.name: n for n in c.body if isinstance(n, ast.FunctionDef)}
    return methods, attrs


Q2_VIDEO = "qwen2_vl/video_processing_qwen2_vl.py"
Q3_VIDEO = "qwen3_vl/video_processing_qwen3_vl.py"
smart_resize = function("qwen2_vl/image_processing_qwen2_vl.py", "smart_resize")
smart_resize_3d = function(Q3_VIDEO, "smart_resize")


def video_rule(rel, cls_name):
    methods, attrs = cls(rel, cls_name)
    sample = _compile(methods["sample_frames"], rel)
    self = SimpleNamespace(
        num_frames=None,
        fps=2,
        temporal_patch_size=attrs["temporal_patch_size"],
        min_frames=attrs["min_frames"],
        max_frames=attrs["max_frames"],
    )
    return sample, self, attrs


# Image limits: the checkpoints' preprocessor_config.json (Qwen2-VL-7B-Instruct and
# Qwen2.5-VL: min_pixels 3136, max_pixels 12845056; Qwen3-VL: size shortest_edge 65536,
# longest_edge 16777216).
FAMILIES = {
    "qwen2-vl": dict(patch=14, image=(3136, 12845056), video=(Q2_VIDEO, "Qwen2VLVideoProcessor")),
    "qwen2.5-vl": dict(patch=14, image=(3136, 12845056), video=(Q2_VIDEO, "Qwen2VLVideoProcessor")),
    "qwen3-vl": dict(patch=16, image=(65536, 16777216), video=(Q3_VIDEO, "Qwen3VLVideoProcessor")),
}


def expected_image(fam, h, w):
    f = FAMILIES[fam]
    factor = f["patch"] * 2
    hh, ww = smart_resize(h, w, factor=factor, min_pixels=f["image"][0], max_pixels=f["image"][1])
    return [1, hh // f["patch"], ww // f["patch"]]


def expected_video(fam, frames, fps, h, w):
    f = FAMILIES[fam]
    sample, self, attrs = video_rule(*f["video"])
    assert attrs["patch_size"] == f["patch"] and attrs["merge_size"] == 2
    tp = attrs["temporal_patch_size"]
    n = len(sample(self, SimpleNamespace(total_num_frames=frames, fps=fps), fps=2))
    lo, hi = attrs["size"]["shortest_edge"], attrs["size"]["longest_edge"]
    factor = f["patch"] * 2
    if fam == "qwen3-vl":
        hh, ww = smart_resize_3d(n, h, w, temporal_factor=tp, factor=factor, min_pixels=lo, max_pixels=hi)
    else:
        hh, ww = smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi)
    return [(n + tp - 1) // tp, hh // f["patch"], ww // f["patch"]]


def random_side(r, other=None):
    side = int(math.exp(r.uniform(math.log(8), math.log(9000))))
    if other is not None:  # keep the aspect ratio <= 200 (the processors refuse more)
        side = max(side, other // 199 + 1)
        side = min(side, other * 199)
    return side


@pytest.mark.parametrize("fam", sorted(FAMILIES))
def test_grids_match_transformers(fam, tmp_path):
    if not os.path.exists(BIN):
        pytest.fail(f"frameshard binary not found: {BIN} (set FRAMESHARD_BIN)")
    r = random.Random(sum(map(ord, fam)))
    lines, expected = [], []
    for _ in range(300):
        h = random_side(r)
        w = random_side(r, h)
        lines.append({"images": [[h, w]]})
        expected.append([expected_image(fam, h, w)])
    for _ in range(200):
        fps = r.choice([1, 8, 23.976, 24, 25, 29.97, 30, 60])
        frames = r.randint(2, 20000)
        h = r.randint(16, 2200)
        w = r.randint(max(16, h // 199 + 1), min(3900, h * 199))
        lines.append({"videos": [{"frames": frames, "fps": fps, "height": h, "width": w}]})
        expected.append([expected_video(fam, frames, fps, h, w)])
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = subprocess.run(
        [BIN, "analyze", str(manifest), "--family", fam, "--emit-grids"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    got = [json.loads(x)["grid_thw"] for x in out]
    assert len(got) == len(expected)
    bad = [(lines[i], got[i], expected[i]) for i in range(len(got)) if got[i] != expected[i]]
    assert not bad, f"{len(bad)} of {len(got)} differ, first: {bad[:3]}"
