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
import tempfile

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
        assert r["checkpointing"] == [True, True], "GRPOConfig's gradient checkpointing is off"
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


def _record(seq, name="loss", state=0, calls=1, grad=1, error=""):
    """A lockstep record as a process sends it (integrations/_lockstep.py)."""
    import torch

    from frameshard.integrations import _lockstep

    lock = _lockstep.Lockstep(None, torch.device("cpu"), "test")
    p = _lockstep.Pass(name, seq, 0, torch.nn.Identity()) if seq else None
    with torch.set_grad_enabled(bool(grad)):
        return lock._record(p, state, calls, error).tolist()


def test_lockstep_decisions_are_the_same_on_every_process():
    """The decision every process takes from the same records: the most calls any forward makes,
    or one error naming what differs."""
    import frameshard
    from frameshard.integrations._lockstep import CALL, END, FAILED, SLOT, decide

    assert decide([_record(3, calls=0), _record(3, calls=2)], 0, 2, "t") == 2
    assert decide([_record(3, state=END, calls=0)] * 2, 1, 2, "t") == 0
    cases = [
        ([_record(3, state=SLOT), _record(3, state=END)], "run the model as often in its loss pass #3"),
        ([_record(3), _record(4, name="generation")], "rank 0 in its loss pass #3 (model 0) and rank 1 in its "
                                                      "generation pass #4"),
        ([_record(0, state=CALL), _record(3)], "no pass (a vision call outside the trainer's passes)"),
        ([_record(3, grad=0), _record(3, grad=1)], "same grad mode"),
        ([_record(3), _record(3, state=FAILED, error="ValueError: boom")], "rank 1 failed in its loss pass #3 "
                                                                        "(model 0): ValueError: boom"),
    ]  # fmt: skip
    for records, text in cases:
        messages = []
        for rank in range(2):
            with pytest.raises(frameshard.FrameshardError, match=r"\[rank %d/2\]" % rank) as e:
                decide(records, rank, 2, "frameshard.integrations.trl")
            assert text in str(e.value), (text, str(e.value))
            assert e.value.frameshard_agreed
            messages.append(str(e.value).split("] ", 1)[1])
        assert messages[0] == messages[1]


def test_enable_refuses_what_it_cannot_run():
    import frameshard
    from frameshard.integrations import trl as fs_trl

    with pytest.raises(
        frameshard.FrameshardError,
        match="expected a trl.GRPOTrainer or a transformers Trainer .trl.SFTTrainer., got object",
    ):
        fs_trl.enable(object())
    config = fs_trl.grpo_config()
    assert (config.enabled, config.dedup, config.mesh_dims, config.min_tokens, config.min_frames) == (
        True, True, ["dp", "cp"], 0, 0)  # fmt: skip
    assert fs_trl.SUPPORTED_TRL == ">=1.16.0,<2"


def test_one_process_without_torch_distributed():
    """The example as `python trl_grpo.py` (no launcher, torch.distributed never initialized): a
    one-rank group of frameshard's own, each step encoding each distinct image once."""
    import re
    import subprocess

    example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python", "trl_grpo.py")
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run(
            [sys.executable, example, "--steps", "1", "--batch", "4", "--output-dir", tmp],
            capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"),
        )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    found = re.search(r"step 1: loss \S+, vision rows encoded (\d+) of (\d+)", p.stdout)
    assert found, p.stdout[-2000:]
    encoded, total = int(found.group(1)), int(found.group(2))
    assert encoded * 4 == total, (encoded, total)  # one process, G = 4 copies of one prompt
