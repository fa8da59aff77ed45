"""Parity of `frameshard encode` with Hugging Face transformers, the reference implementation.

For every family that tests/python/make_hf_fixtures.py wrote, runs

    <frameshard> encode --model-dir F/model --inputs F/inputs.safetensors --out OUT [--nproc 2]

and requires every compared reference tensor (embeddings, deepstack_*) to be present with the
same shape and a max abs difference <= 1e-4 (float32), both unsharded and sharded over two rank
processes. A negative control perturbs one vision weight and requires the comparison to fail.

Environment:
  FRAMESHARD_BIN          the binary (default: <repo>/build/frameshard)
  FRAMESHARD_HF_FIXTURES  a directory from make_hf_fixtures.py (default: made in a temp dir)

Run it with the modern-tier venv: `.venv/bin/python -m pytest tests/python/test_hf_parity.py`,
or through ctest (tests/cli/hf_parity_test.sh), which also sets the venv up. It skips only when
the binary has no `encode` command, and never when CI is set.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import safetensors.torch
import torch
from safetensors.numpy import load_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.abspath(os.environ.get("FRAMESHARD_BIN", os.path.join(ROOT, "build", "frameshard")))
TOLERANCE = 1e-4
# Nemotron Omni's RADIO + projector (`radio` tower), from a float32 and from a bfloat16 checkpoint.
OMNI_FAMILIES = ("nemotron_h_omni", "nemotron_h_omni_bf16")
REQUIRED_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl") + OMNI_FAMILIES
ALL_FAMILIES = REQUIRED_FAMILIES + ("qwen3_5",)
ENCODE_TIMEOUT_S = 180


def _in_ci():
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _encode_command_state():
    """None when `encode` is usable; otherwise why not."""
    if not os.path.isfile(BIN) or not os.access(BIN, os.X_OK):
        return "missing"
    proc = subprocess.run([BIN, "encode", "--help"], capture_output=True, text=True, timeout=60)
    # CLI11 prints the top-level help (exit 0) for an unknown subcommand with --help, so look for
    # one of encode's own options.
    if proc.returncode == 0 and "--model-dir" in proc.stdout:
        return None
    return "no-encode"


@pytest.fixture(scope="session")
def binary():
    state = _encode_command_state()
    if state == "missing":
        pytest.fail("frameshard binary not found or not executable: %s (set FRAMESHARD_BIN)" % BIN)
    if state == "no-encode":
        message = "%s has no `encode` command" % BIN
        if _in_ci():
            pytest.fail(message + " (CI is set: the parity test must run)")
        pytest.skip(message + "; build the frameshard CLI with the towers to run this test")
    return BIN


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory):
    """Directory with manifest.json and one subdirectory per family."""
    root = os.environ.get("FRAMESHARD_HF_FIXTURES")
    if not root:
        root = str(tmp_path_factory.mktemp("hf_fixtures"))
        script = os.path.join(ROOT, "tests", "python", "make_hf_fixtures.py")
        subprocess.run([sys.executable, script, "--out", root], check=True)
    manifest_path = os.path.join(root, "manifest.json")
    assert os.path.isfile(manifest_path), "no manifest.json in %s: run make_hf_fixtures.py" % root
    with open(manifest_path) as f:
        manifest = json.load(f)
    return root, manifest


def _family_dir(fixtures, family):
    root, manifest = fixtures
    if family not in manifest["families"]:
        reason = manifest.get("skipped", {}).get(family)
        if family in REQUIRED_FAMILIES or reason is None:
            pytest.fail("fixtures in %s lack required family %s" % (root, family))
        pytest.skip("%s: %s" % (family, reason))
    return os.path.join(root, family)


# Split frames: frame_sharding.split_frames on, and no exchange cost or latency (the tiny towers'
# rows cost less than the default cost of a bf16 row and of an exchange at realistic widths, which
# would forbid every cut).
SPLIT_OVERRIDES = [
    "--distributed.multimodal.vision.frame_sharding.split_frames",
    "true",
    "--distributed.multimodal.vision.frame_sharding.split_exchange_cost",
    "0",
    "--distributed.multimodal.vision.frame_sharding.split_exchange_latency_us",
    "0",
]


def _encode(binary, model_dir, inputs, out, nproc=1, extra=()):
    cmd = [binary, "encode", "--model-dir", model_dir, "--inputs", inputs, "--out", out, "--dtype", "float32"]
    if nproc > 1:
        cmd += ["--nproc", str(nproc), "--json"]
    cmd += list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=ENCODE_TIMEOUT_S)
    assert proc.returncode == 0, "%s\nexit %d\nstdout:\n%s\nstderr:\n%s" % (
        " ".join(cmd),
        proc.returncode,
        proc.stdout,
        proc.stderr,
    )
    assert os.path.isfile(out), "encode exited 0 but wrote no %s" % out
    if nproc > 1:
        _check_sharded(proc.stdout, nproc, split=bool(extra))
    return load_file(out)


def _check_sharded(stdout, nproc, split=False):
    """With --nproc N the frames must really be split: a silent fall-back to one rank would make
    the sharded comparison a copy of the unsharded one. With split frames, some frame must be cut
    across ranks (pieces reported)."""
    report = json.loads(stdout)
    plan = report.get("plan", {})
    ranks = plan.get("ranks", [])
    assert plan.get("path") == "sharded", "encode --nproc %d did not shard: plan %s" % (nproc, plan)
    assert len(ranks) == nproc and all(r.get("patch_rows", 0) > 0 for r in ranks), plan
    if split:
        assert plan.get("split") is True, "no frame was split: plan %s" % plan
        assert sum(len(r.get("pieces", [])) for r in ranks) >= 2, plan


def _compared_names(reference):
    return sorted(k for k in reference if not k.startswith("debug_"))


def _diffs(reference, output):
    """(per-tensor max abs diff, list of problems), comparing every non-debug reference tensor."""
    diffs, problems = {}, []
    for name in _compared_names(reference):
        ref = reference[name]
        if name not in output:
            problems.append("missing %s %s" % (name, list(ref.shape)))
            continue
        got = output[name]
        if got.dtype != np.float32:
            problems.append("%s has dtype %s, expected float32" % (name, got.dtype))
        if got.shape != ref.shape:
            problems.append("%s has shape %s, expected %s" % (name, list(got.shape), list(ref.shape)))
            continue
        delta = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        if not np.isfinite(delta).all():
            problems.append("%s has non-finite values" % name)
            diffs[name] = float("inf")
            continue
        diffs[name] = float(delta.max())
        if diffs[name] > TOLERANCE:
            bad_rows = np.nonzero(delta.max(axis=1) > TOLERANCE)[0]
            problems.append(
                "%s: max abs diff %.3g > %g; %d of %d rows differ, first at row %d"
                % (name, diffs[name], TOLERANCE, len(bad_rows), ref.shape[0], bad_rows[0])
            )
    extra = sorted(k for k in output if k.startswith("deepstack_") and k not in reference)
    if extra:
        problems.append("unexpected outputs %s (the reference has none)" % extra)
    return diffs, problems


def _format(diffs):
    return " ".join("%s=%.2e" % kv for kv in sorted(diffs.items()))


def test_fixtures_cover_the_families(fixtures):
    root, manifest = fixtures
    for family in REQUIRED_FAMILIES:
        assert family in manifest["families"], "no %s fixture in %s" % (family, root)
    for family in ALL_FAMILIES:
        if family not in manifest["families"]:
            assert family in manifest.get("skipped", {}), family
    qwen3 = load_file(os.path.join(root, "qwen3_vl", "reference.safetensors"))
    assert any(k.startswith("deepstack_") for k in qwen3), "the Qwen3-VL fixture has no DeepStack outputs"
    # Several media, one of them a multi-frame video.
    inputs = load_file(os.path.join(root, "qwen3_vl", "inputs.safetensors"))
    grid = inputs["grid_thw"]
    assert grid.shape[0] >= 3 and (grid[:, 0] > 1).any(), grid
    assert inputs["pixel_values"].shape[0] == int(np.prod(grid, axis=1).sum())


@pytest.mark.parametrize("nproc,split", [(1, False), (2, False), (4, True)], ids=["nproc1", "nproc2", "nproc4-split"])
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_encode_matches_transformers(binary, fixtures, family, nproc, split, tmp_path):
    fam = _family_dir(fixtures, family)
    if split and family in OMNI_FAMILIES:
        _check_split_refused(binary, fam, tmp_path)
        return
    reference = load_file(os.path.join(fam, "reference.safetensors"))
    output = _encode(
        binary,
        os.path.join(fam, "model"),
        os.path.join(fam, "inputs.safetensors"),
        str(tmp_path / "out.safetensors"),
        nproc=nproc,
        extra=SPLIT_OVERRIDES if split else (),
    )
    diffs, problems = _diffs(reference, output)
    label = "nproc=%d%s" % (nproc, " split" if split else "")
    print("\nhf-parity %-10s %s max abs diff: %s" % (family, label, _format(diffs)))
    assert not problems, (
        "%s (%s) disagrees with transformers:\n  %s\n"
        "reference.safetensors also holds debug_patch_embed, debug_block_input, debug_rotary_*, "
        "debug_block<i> (input row order) to find the first diverging stage." % (family, label, "\n  ".join(problems))
    )


def _check_split_refused(binary, fam, tmp_path):
    """RADIO takes no pieces of split frames: encode must refuse split_frames by name, not run."""
    cmd = [binary, "encode", "--model-dir", os.path.join(fam, "model"), "--inputs"]
    cmd += [os.path.join(fam, "inputs.safetensors"), "--out", str(tmp_path / "out.safetensors")]
    cmd += ["--nproc", "2"] + SPLIT_OVERRIDES
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=ENCODE_TIMEOUT_S)
    assert proc.returncode != 0 and "split_frames false for a radio tower" in proc.stderr, proc.stderr


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_perturbed_weight_is_detected(binary, fixtures, family, tmp_path):
    """Negative control: the comparison must fail when one vision weight is off by a little."""
    fam = _family_dir(fixtures, family)
    model_dir = tmp_path / "model"
    shutil.copytree(os.path.join(fam, "model"), model_dir)
    weights_path = str(model_dir / "model.safetensors")
    weights = safetensors.torch.load_file(weights_path)  # numpy has no bfloat16
    target = [k for k in weights if k.endswith("blocks.0.attn.qkv.weight")]
    assert len(target) == 1, sorted(weights)
    w = weights[target[0]]
    noise = torch.randn(w.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float32)
    weights[target[0]] = (w.float() + 0.01 * noise).to(w.dtype)
    safetensors.torch.save_file(weights, weights_path, metadata={"format": "pt"})

    reference = load_file(os.path.join(fam, "reference.safetensors"))
    output = _encode(binary, str(model_dir), os.path.join(fam, "inputs.safetensors"), str(tmp_path / "out.safetensors"))
    diffs, _ = _diffs(reference, output)
    assert diffs.get("embeddings", 0.0) > 10 * TOLERANCE, (
        "perturbing %s changed the embeddings by only %s: the parity check would not notice a wrong weight"
        % (target[0], _format(diffs))
    )
