"""The GPU check (scripts/gpu-check.sh) in its CPU dry run: CI's guard that the script a GPU
session runs once, unseen, still works.

`FRAMESHARD_GPU_DRYRUN=1 bash scripts/gpu-check.sh` runs every measuring step on the CPU at toy
sizes with the existing build and writes the GPU run's JSON: every section (parity, tower_speed,
calibrate, rank_shares, split) filled, every step ok, each with the limit it was designed
against and its time. And a step that fails or has no time left is recorded as such, the others
still run, and the command says so by its exit code.

Needs the build (FRAMESHARD_BUILD_DIR, default <repo>/build) and the installed package."""

import functools
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("FRAMESHARD_BUILD_DIR", os.path.join(ROOT, "build"))
SECTIONS = ("parity", "tower_speed", "calibrate", "rank_shares", "split")
DTYPES = ("bfloat16", "float32")


@functools.lru_cache(maxsize=1)
def _dry_run(out):
    """One run for every test here (a fixture that fails would run again for each)."""
    env = dict(
        os.environ,
        FRAMESHARD_GPU_DRYRUN="1",
        OUT=str(out),
        FRAMESHARD_PYTHON=sys.executable,
        FRAMESHARD_GPU_BUILD=BUILD,
    )
    return subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "gpu-check.sh")], env=env, capture_output=True, text=True, timeout=400
    )


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.getbasetemp() / "gpu_check"
    out.mkdir(exist_ok=True)
    proc = _dry_run(out)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(out / "gpu_check.json") as f:
        return json.load(f), (out / "summary.txt").read_text(), proc.stdout


def test_dry_run_fills_every_section_with_steps_that_name_their_limit(dry_run):
    result, summary, _ = dry_run
    assert result["mode"] == "dry-run"
    for section in SECTIONS:
        assert result[section], section
        for name, step in result[section].items():
            assert step["status"] == "ok", (section, name, step.get("log_tail"))
            assert step["limit"] and step["budget_s"] > 0 and step["seconds"] >= 0
            assert "data" in step, (section, name)
        assert section + ":" in summary
    # 90 s on two quiet cores; CI runs it next to another test.
    assert sum(s["seconds"] for s in result["steps"]) < 300


def test_dry_run_parity_compares_both_families_in_both_dtypes(dry_run):
    parity = dry_run[0]["parity"]
    assert parity["cuda_ranks"]["data"]["tests"] >= 1 and not parity["cuda_ranks"]["data"]["failed"]
    cases = parity["hf"]["data"]["cases"]
    assert {(c["family"], c["dtype"], c["split"]) for c in cases} == {
        (f, d, s) for f in ("qwen2_5_vl", "qwen3_vl") for d in DTYPES for s in (False, True)
    }
    assert all(c["ok"] and c["grad_diff"] <= c["tolerance"] for c in cases)


def test_dry_run_times_towers_calibrates_and_times_every_arm(dry_run):
    result = dry_run[0]
    for dtype in DTYPES:
        fam = result["tower_speed"][dtype]["data"]["families"]["qwen2_vl"]
        assert fam["forward_backward_ratio_vs_hf_sdpa"] > 0
        cal = result["calibrate"][dtype]["data"]
        assert cal["dtype"] == dtype and cal["a"] >= 0 and cal["check"]["plans"] == 4
        shares = result["rank_shares"][dtype]["data"]
        assert shares["dtype"] == dtype and shares["calibration"].endswith("calibration_%s.txt" % dtype)
        assert len(shares["batches"]) == 7  # four presets, three manifests
        split = result["split"][dtype]["data"]["batches"]
        for batch in shares["batches"] + split:
            assert [c["cp"] for c in batch["cps"]] == [2, 4]
            for at in batch["cps"]:
                arms = {(a["arm"], a["cost"]) for a in at["arms"]}
                # The split step learns cost_alpha online from its own shares' times too.
                online = {("split", "online")} if batch in split else set()
                assert arms == online | {
                    (arm, cost)
                    for arm in ("optimal", "greedy", "count", "lpt", "split")
                    for cost in ("flop", "calibrated")
                }
                assert all(len(a["rank_s"]) == at["cp"] and a["speedup"] > 0 for a in at["arms"])
                for a in at["arms"]:
                    if a["cost"] == "online":
                        assert len(a["curve_over_ideal"]) == 6 and a["fit"].startswith("online"), a


def test_a_failing_step_and_a_spent_deadline_are_recorded_and_the_rest_still_run(tmp_path):
    empty = tmp_path / "no-build"
    empty.mkdir()
    argv = [sys.executable, os.path.join(ROOT, "bench", "gpu_check.py"), "--dry-run", "--out", str(tmp_path)]
    proc = subprocess.run(
        [*argv, "--build", str(empty), "--only", "calibrate"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stdout
    with open(tmp_path / "gpu_check.json") as f:
        steps = json.load(f)["steps"]
    assert [(s["step"], s["status"]) for s in steps] == [
        ("calibrate/bfloat16", "failed"),
        ("calibrate/float32", "failed"),
    ]
    proc = subprocess.run(
        [*argv, "--build", BUILD, "--only", "split", "--deadline-s", "1"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stdout
    with open(tmp_path / "gpu_check.json") as f:
        assert {s["status"] for s in json.load(f)["steps"]} == {"skipped"}
