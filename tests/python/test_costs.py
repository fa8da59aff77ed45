"""The installed package's build facts and the cost of the tower it wraps (single process).

- `frameshard.__version__` and `frameshard.build_info()` agree with CMakeLists.txt, the installed
  distribution and the running torch.
- `frameshard.tower_dims` reads every supported transformers vision module (and its config, and
  a whole model's config) into the dimensions the C++ FLOP model counts; the cost model of a
  tiny tower is its own, not the released preset's.
- The same dimensions through both layers: for every family with a whole model, the label of the
  cost model that `frameshard encode --model-dir` (the C++ config.json reader) plans with equals
  the one the Python package derives from the transformers module.

Run: `.venv/bin/python -m pytest tests/python/test_costs.py` after installing the package (or
with PYTHONPATH=build/python-dev from scripts/python-dev.sh); tests/python/package_test.sh runs it.
"""

import importlib.metadata
import json
import os
import re
import subprocess
import sys

import pytest
import torch

import frameshard

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import hf_models  # noqa: E402

BIN = os.environ.get("FRAMESHARD_BIN", os.path.join(ROOT, "build", "frameshard"))


def cmake_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(frameshard VERSION ([0-9.]+)", f.read()).group(1)


def test_version_is_the_cmake_project_version_everywhere():
    assert frameshard.__version__ == cmake_version()
    try:
        installed = importlib.metadata.version("frameshard")
    except importlib.metadata.PackageNotFoundError:
        # Only an in-tree layout (scripts/python-dev.sh) has no distribution metadata.
        assert "site-packages" not in frameshard.__file__
        return
    assert installed == cmake_version()  # pyproject.toml's version is read from CMakeLists.txt


def test_build_info_names_version_revision_torch_and_backends():
    info = frameshard.build_info()
    assert info["version"] == frameshard.__version__
    assert info["torch"] == torch.__version__ == info["torch_runtime"]
    assert info["git_revision"] != ""
    assert isinstance(info["cuda"], bool) and isinstance(info["nccl"], bool)
    assert info["cuda"] == (torch.version.cuda is not None)
    assert not info["nccl"] or info["cuda"]
    text = info["text"]
    assert text.startswith("frameshard %s (git %s)\n" % (info["version"], info["git_revision"]))
    assert "torch: %s\n" % torch.__version__ in text and "nccl: " in text


# Per family: what transformers' config of the tiny test model holds, as the C++ cost model's
# dimensions (independently of the family modules: the fixtures' numbers).
def expected_dims(family, visual):
    c = visual.config
    if family == "qwen2_vl":
        return frameshard.TowerDims(
            name="qwen2-vl",
            depth=c.depth,
            hidden=c.embed_dim,
            intermediate=int(c.embed_dim * c.mlp_ratio),
            mergers=1,
            merge_size=c.spatial_merge_size,
            out_hidden=c.hidden_size,
        )
    if family == "qwen2_5_vl":
        # transformers: window_size // merge // patch merged tokens a side, merge patches each.
        side = c.window_size // c.spatial_merge_size // c.patch_size * c.spatial_merge_size
        return frameshard.TowerDims(
            name="qwen2.5-vl",
            depth=c.depth,
            hidden=c.hidden_size,
            intermediate=c.intermediate_size,
            gated_mlp=True,
            window_patches=side * side,
            full_attention_layers=tuple(sorted(c.fullatt_block_indexes)),
            mergers=1,
            merge_size=c.spatial_merge_size,
            out_hidden=c.out_hidden_size,
        )
    deepstack = len(getattr(c, "deepstack_visual_indexes", None) or [])
    return frameshard.TowerDims(
        name="qwen3.5" if family.startswith("qwen3_5") else "qwen3-vl",
        depth=c.depth,
        hidden=c.hidden_size,
        intermediate=c.intermediate_size,
        mergers=1 + deepstack,
        merge_size=c.spatial_merge_size,
        out_hidden=c.out_hidden_size,
    )


@pytest.mark.parametrize("family", hf_models.FAMILIES)
def test_tower_dims_of_every_family_module_config_and_wrapped(family):
    model, visual, _ = hf_models.build(family)
    want = expected_dims(family, visual)
    assert frameshard.tower_dims(visual) == want
    assert frameshard.tower_dims(visual.config) == want
    if model is not visual:
        assert frameshard.tower_dims(model.config) == want  # a whole model's config
        assert frameshard.tower_dims(model) == want
    if family == "qwen3_vl":
        assert want.mergers > 1  # DeepStack mergers counted


def test_cost_model_is_the_wrapped_towers_not_the_preset():
    _, visual, _ = hf_models.build("qwen3_vl")
    dims = frameshard.tower_dims(visual)
    cost = frameshard.cost_model(dims)
    d, f, m2 = dims.hidden, dims.intermediate, dims.merge_size**2
    # include/frameshard/cost.h: b = (depth (2d + f) + M (d m^2 + o) / 2) / L_full.
    want_b = (dims.depth * (2 * d + f) + dims.mergers * (d * m2 + dims.out_hidden) / 2) / dims.depth
    assert cost["a"] == 1.0 and cost["b"] == pytest.approx(want_b, rel=1e-12)
    assert cost["label"].startswith("auto (qwen3-vl depth %d, width %d" % (dims.depth, d))
    preset = frameshard.plan([[1, 8, 8]], 2).cost_model
    assert preset.startswith("auto (qwen3-vl FLOPs, alpha=7214.8")  # the released tower's
    # plan() with the module costs the module; automodel reads its width too.
    cfg = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0)
    assert frameshard.plan([[1, 8, 8]], 2, cfg, tower=visual).cost_model == cost["label"]
    auto3 = frameshard.FrameShardingConfig(enabled=True, cost_alpha="automodel")
    assert frameshard.plan([[1, 8, 8]], 2, auto3, tower=dims).cost_model == ("automodel (3*hidden=%d)" % (3 * d))
    # A window tower: the window term and the pieces' window side come from the module.
    _, v25, _ = hf_models.build("qwen2_5_vl")
    c25 = frameshard.cost_model(frameshard.tower_dims(v25))
    assert c25["window"] == frameshard.tower_dims(v25).window_patches and c25["window_coef"] > 0


def test_plan_with_costs_of_a_small_tower_cuts_where_its_real_cost_says():
    # The released tower's large alpha weighs rows almost linearly; a small tower's quadratic
    # term dominates, so the two models can cut the same batch differently. The plan must
    # follow the module's own model: its max rank cost under that model is minimal.
    _, visual, _ = hf_models.build("qwen3_vl")
    dims = frameshard.tower_dims(visual)
    grid = [[1, 48, 48], [1, 8, 8], [1, 8, 8], [1, 16, 16], [1, 24, 8], [1, 8, 16]]
    cfg = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0, min_local_patch_rows=0)
    own = frameshard.plan(grid, 2, cfg, tower=dims)
    cost = frameshard.cost_model(dims)

    def under_own_model(p):
        return max(
            sum(cost["a"] * u.patch_rows**2 + cost["b"] * u.patch_rows for u in [p.units[i] for i in r.units])
            for r in p.ranks
        )

    preset = frameshard.plan(grid, 2, cfg)
    assert own.cost_model != preset.cost_model
    assert under_own_model(own) <= under_own_model(preset) * (1 + 1e-12)


def test_tower_dims_refuses_what_it_cannot_read():
    with pytest.raises(frameshard.FrameshardError, match="expected a transformers vision module"):
        frameshard.tower_dims(torch.nn.Linear(2, 2))
    with pytest.raises(frameshard.FrameshardError, match="expected tower to be TowerDims"):
        frameshard.plan([[1, 4, 4]], 2, tower=object())


@pytest.mark.skipif(not os.access(BIN, os.X_OK), reason="needs the frameshard CLI (build/frameshard)")
@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_cpp_encode_plans_with_the_same_cost_model(family, tmp_path):
    from safetensors.torch import save_file

    model, visual, inputs = hf_models.build(family)
    model.save_pretrained(tmp_path / "model")
    save_file(
        {"pixel_values": inputs["pixel_values"].contiguous(), "grid_thw": inputs["image_grid_thw"]},
        str(tmp_path / "inputs.safetensors"),
    )
    proc = subprocess.run(
        [
            BIN,
            "encode",
            "--model-dir",
            str(tmp_path / "model"),
            "--inputs",
            str(tmp_path / "inputs.safetensors"),
            "--out",
            str(tmp_path / "out.safetensors"),
            "--nproc",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout[proc.stdout.index("{") :])
    want = frameshard.cost_model(frameshard.tower_dims(visual))["label"]
    assert report["plan"]["cost_model"] == want


def test_calibrate_times_the_module_and_writes_a_file_cost_alpha_reads(tmp_path):
    _, visual, _ = hf_models.build("qwen2_vl")
    out = str(tmp_path / "cal.txt")
    cal = frameshard.calibrate(visual, out, sizes=(16, 64, 144), repeats=1)
    # The sweep: each size alone, 4-frame calls up to a quarter of the largest, 16 of the smallest.
    assert [(p, k) for p, k, _ in cal.samples] == [(16, 1), (64, 1), (144, 1), (16, 4), (16, 16)]
    assert all(s > 0 for _, _, s in cal.samples)
    assert min(cal.a, cal.b, cal.c, cal.per_call) >= 0 and cal.a + cal.b + cal.c > 0
    text = open(out).read()
    assert text == cal.text and text.rstrip().splitlines()[-1].startswith("quadratic:")
    assert "forward + backward" in text and "p    64 x  1" in text
    cfg = frameshard.FrameShardingConfig(enabled=True, cost_alpha=out)
    p = frameshard.plan([[1, 8, 8], [1, 4, 4]], 2, cfg, tower=visual)
    assert p.cost_model.startswith("calibrated ") and out in p.cost_model
    # A callable tower needs its geometry.
    with pytest.raises(frameshard.FrameshardError, match="expected features and spatial_merge_size"):
        frameshard.calibrate(lambda pv, g, cu: pv, sizes=(16,))
    plain = frameshard.calibrate(
        lambda pv, g, cu: pv * 2, features=4, spatial_merge_size=2, sizes=(4, 16), repeats=1, backward=False
    )
    assert len(plain.samples) == 4 and plain.path is None


def test_python_m_frameshard_version_and_calibrate(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    v = subprocess.run(
        [sys.executable, "-m", "frameshard", "--version"], capture_output=True, text=True, env=env, timeout=120
    )
    assert v.returncode == 0 and v.stdout.startswith("frameshard %s (git " % frameshard.__version__), v.stderr
    out = str(tmp_path / "cal.txt")
    c = subprocess.run(
        [
            sys.executable,
            "-m",
            "frameshard",
            "calibrate",
            "--family",
            "qwen3_vl",
            "--width",
            "64",
            "--depth",
            "2",
            "--sizes",
            "16",
            "64",
            "--repeats",
            "1",
            "--out",
            out,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert c.returncode == 0, c.stderr
    assert "wrote %s: quadratic" % out in c.stdout and open(out).read().rstrip().splitlines()[-1].startswith(
        "quadratic:"
    )
    bad = subprocess.run(
        [sys.executable, "-m", "frameshard", "calibrate", "--sizes", "15", "--out", out],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: frameshard.calibrate: sizes: expected")
    none = subprocess.run([sys.executable, "-m", "frameshard"], capture_output=True, text=True, env=env, timeout=120)
    assert none.returncode == 2 and "expected a command" in none.stderr
