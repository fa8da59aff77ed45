"""frameshard.integrations.trl: TRL's GRPOTrainer with each distinct image encoded once across
processes, against the same training without it (trl pinned in .venv, 2 Gloo processes).

One launch of tests/python/trl_worker.py runs every scenario (harness.run_world); each trains a
tiny random Qwen-VL twice from the same seed for 2 optimizer steps. Tolerances: float32 losses
and parameters within 1e-5 (the towers see other batches of frames, so float32 rounding
differs); float64 every tensor's update within 1e-6 of its size (GRPO's group advantages make the
vision gradient a sum that largely cancels, so float32 updates can differ by 2e-3 relative while
the parameters agree to 6e-7: issue 46).

Run: `.venv/bin/python -m pytest tests/python/test_trl.py` after installing the package with its
`trl` extra (or PYTHONPATH=build/python-dev), or through ctest (label `python`).
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run_selected, scenario  # noqa: E402

pytest.importorskip("trl")

FLOAT32 = 1e-5
FLOAT64_UPDATE = 1e-5
FLOAT64_GRAD = 1e-7


@pytest.fixture(scope="module")
def world2():
    return 2, run_selected("trl_worker.py", 2)


def _parity(world2, name, float64=False, tower_trains=True):
    """Both arms' losses, parameters after 2 steps, every vision call's outputs on each process,
    and every gradient at each step (plain SGD: a gradient of the wrong scale moves the
    parameters, where AdamW would hide it); in float64 each tensor's update too."""
    world, per_rank = scenario(world2, name)
    for rank, r in enumerate(per_rank):
        print(
            "trl %-10s rank %d: losses %s / %s (diff %.3g), params diff %.3g (scale %.3g), update rel %.3g, "
            "features diff %.3g (scale %.3g, %d calls), grads diff %.3g (scale %.3g; vision %.3g of %.3g), "
            "tower rows %d -> %d, passes %s"
            % (name, rank, r["losses_off"], r["losses_on"], r["loss_diff"], r["param_diff"], r["param_scale"],
               r["update_rel"], r["feature_diff"], r["feature_scale"], r["feature_calls"], r["grad_diff"],
               r["grad_scale"], r["vision_grad_diff"], r["vision_grad_scale"], r["seen_off"], r["seen_on"],
               r["passes"])
        )  # fmt: skip
        assert len(r["losses_on"]) == 2 and r["feature_calls"] > 0, r
        assert r["loss_diff"] <= FLOAT32, (name, rank, r["loss_diff"])
        assert r["param_diff"] <= FLOAT32 * max(1.0, r["param_scale"]), (name, rank, r["param_diff"])
        assert r["feature_diff"] <= FLOAT32 * max(1.0, r["feature_scale"]), (name, rank, r["feature_diff"])
        assert r["grad_diff"] <= FLOAT32 * max(1.0, r["grad_scale"]), (name, rank, r["grad_diff"])
        assert (r["vision_grad_scale"] > 0) == tower_trains, r["vision_grad_scale"]
        if float64:
            assert r["update_rel"] <= FLOAT64_UPDATE, (name, rank, r["update_rel"])
            assert r["grad_diff"] <= FLOAT64_GRAD * max(1.0, r["grad_scale"]), (name, rank, r["grad_diff"])
        assert r["disabled"]
    return per_rank


def _encoded_once(per_rank, passes):
    """Every vision call of every pass: the towers of both processes together saw each distinct
    frame's rows once (the rest of what they saw is the placeholder frame of a process without
    frames), and fewer than the calls' rows (each use)."""
    calls = [r["calls"] for r in per_rank]
    assert len({len(c) for c in calls}) == 1, "the processes made different numbers of calls"
    assert sorted(per_rank[0]["passes"]) == sorted(passes), per_rank[0]["passes"]
    saving = False
    for i, c0 in enumerate(calls[0]):
        same = [c[i] for c in calls]
        assert len({(c["name"], c["distinct"], c["total"]) for c in same}) == 1, same
        assert sum(c["real"] for c in same) == c0["distinct"], same
        saving = saving or c0["distinct"] < c0["total"]
    assert saving, "no call had a repeated image"
    # What the patch embeddings saw: the plan's local rows (real + placeholder), nothing else.
    for r in per_rank:
        assert r["seen_on"] == sum(c["local"] for c in r["calls"]), r
    assert sum(r["seen_on"] for r in per_rank) < sum(r["seen_off"] for r in per_rank)
    metrics = per_rank[0]["metrics"]
    assert all(m["frameshard/vision_rows_distinct"] < m["frameshard/vision_rows_total"] for m in metrics), metrics


def test_every_pass_encodes_each_distinct_image_once_and_training_is_unchanged(world2):
    per_rank = _parity(world2, "qwen2_vl")
    _encoded_once(per_rank, ["generation", "log-prob", "loss"])


def test_float64_every_tensor_update_matches(world2):
    per_rank = _parity(world2, "float64", float64=True)
    _encoded_once(per_rank, ["generation", "log-prob", "loss"])


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_other_families(world2, family):
    per_rank = _parity(world2, family)
    _encoded_once(per_rank, ["generation", "log-prob", "loss"])


def test_a_process_without_images_joins_every_pass(world2):
    per_rank = _parity(world2, "text_only")
    # A batch without images on one process: it joined the other's calls, in every pass.
    joined = {c["name"] for r in per_rank for c in r["calls"] if c["own"] == 0}
    assert joined == {"generation", "log-prob", "loss"}, joined
    _encoded_once(per_rank, ["generation", "log-prob", "loss"])


def test_peft_reference_through_the_disabled_adapter(world2):
    per_rank = _parity(world2, "peft")
    _encoded_once(per_rank, ["generation", "log-prob", "loss"])


def test_frozen_tower_still_encodes_each_image_once(world2):
    _encoded_once(_parity(world2, "frozen", tower_trains=False), ["generation", "log-prob", "loss"])


def test_pixel_keys(world2):
    _encoded_once(_parity(world2, "pixels"), ["generation", "log-prob", "loss"])


def test_fsdp2_through_accelerates_plugin(world2):
    _encoded_once(_parity(world2, "fsdp2"), ["generation", "log-prob", "loss"])


def test_unequal_model_calls_with_gradients_raise_on_every_process(world2):
    world, per_rank = scenario(world2, "mismatch")
    for r in per_rank:
        assert r["message"] is not None and "FrameshardError" in r["message"], r
        assert "run the model as often in its loss pass" in r["message"], r
        assert r["seconds"] < 120, r
    assert len({r["message"].split("] ", 1)[1] for r in per_rank}) == 1, per_rank
