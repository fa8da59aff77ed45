"""Split frames (frame_sharding.split_frames) in the transformers vision towers hf.enable patches
(frameshard.hf_split) and in a user's own tower taking pieces (frameshard.shard_vision), against
the replicated tower: outputs and every parameter gradient SUM-all-reduced over the group.

Multi-process: tests/python/split_worker.py runs every scenario of a world in one launch of W
Gloo rank processes (harness.run_world), at world 2 (every family), 3 (the families whose
vision code differs, split_worker.UNEVEN_WORLD_FAMILIES) and 4 (each case once, split_worker.WORLD4;
FRAMESHARD_TEST_SCENARIOS=all runs every family at every world); the scenarios are described there.
Each parity scenario checks that the plan really cut a frame (plan.split and pieces), that a
rank held a piece, and that disable restored the module (no instance forward left).

Tolerances (relative to max(1, the largest replicated value)):
  <family>:exact (sdpa, rotary in float64): RTOL_EXACT = 1e-9. Measured for Qwen2-VL,
    Qwen3-VL(-MoE), Qwen3.5(-MoE): outputs and gradients bitwise equal at world 2, <= 1.7e-15
    relative at worlds 3 and 4. Qwen2.5-VL and GLM-4V(-MoE) keep float32 internals of transformers' own
    even so (RMSNorm in float32; GLM's grid_sample of its position table in float32): their
    outputs are held to RTOL_EXACT (measured <= 8e-16) and their gradients to RTOL_HF (measured
    1.4e-7 and 1.3e-7 relative).
  <family>:<case> (eager, transformers' float32 rotary and softmax): harness.RTOL_HF = 1e-5
    (measured: outputs <= 1.3e-15, gradients <= 3.2e-7 relative).
  <family>:bf16: the sharded run's error against float64 at most LOWP_ERR_FACTOR times the
    replicated run's (as test_wrappers.py; measured: outputs 1.0, gradients <= 1.19 at worlds 2
    and 3, 1.36 at world 4).
  user:<case> (pure torch, float64): RTOL_EXACT (measured <= 1.1e-15).
"""

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import LOWP_ERR_FACTOR, RTOL_HF, assert_parity, run_selected, scenario_or_skip  # noqa: E402
from split_models import FAMILIES  # noqa: E402
from split_worker import CASES  # noqa: E402

RTOL_EXACT = 1e-9
# Families whose float64 run keeps float32 internals of transformers' own (see the banner).
FLOAT32_INTERNALS = ("qwen2_5_vl", "glm4v", "glm4v_moe")
WORLDS = (2, 3, 4)


@pytest.fixture(scope="module", params=WORLDS, ids=["world%d" % w for w in WORLDS])
def world_results(request):
    # FRAMESHARD_TEST_SCENARIOS=a,b (or "all": every family at every world) runs only those.
    return request.param, run_selected("split_worker.py", request.param)


def _scenario(world_results, name):
    return scenario_or_skip(world_results, name, "split_worker.UNEVEN_WORLD_FAMILIES, WORLD4")


def _check_split(world, name, per_rank):
    for rank, res in enumerate(per_rank):
        assert res["split"] and res["pieces"] >= 2, (name, world, rank, res)
    assert any(res["my_pieces"] for res in per_rank), (name, world)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("family", FAMILIES)
def test_split_frames_match_replicated(world_results, family, case):
    name = "%s:%s" % (family, case)
    world, per_rank = _scenario(world_results, name)
    _check_split(world, name, per_rank)
    assert all(res["restored"] for res in per_rank), (name, world)
    assert_parity(world, name, per_rank, RTOL_HF)


@pytest.mark.parametrize("family", FAMILIES)
def test_split_frames_float64_exact(world_results, family):
    name = "%s:exact" % family
    world, per_rank = _scenario(world_results, name)
    _check_split(world, name, per_rank)
    if family in FLOAT32_INTERNALS:
        for res in per_rank:
            assert res["out_diff"] <= RTOL_EXACT * max(1.0, res["out_scale"]), (name, world, res)
        assert_parity(world, name, per_rank, RTOL_HF)
    else:
        assert_parity(world, name, per_rank, RTOL_EXACT)


@pytest.mark.parametrize("family", FAMILIES)
def test_split_frames_bf16_no_less_accurate(world_results, family):
    name = "%s:bf16" % family
    world, per_rank = _scenario(world_results, name)
    _check_split(world, name, per_rank)
    for rank, res in enumerate(per_rank):
        for what in ("out", "grad"):
            rep, got = res["rep_%s_err" % what], res["%s_err" % what]
            bound = LOWP_ERR_FACTOR * rep + 1e-12 * res["%s_scale" % what]
            assert got <= bound, (name, world, rank, what, got, rep)
        errors = (res["out_err"], res["rep_out_err"], res["grad_err"], res["rep_grad_err"])
        print("bf16 %-14s world %d rank %d: out err %.3g (replicated %.3g), grad err %.3g (replicated %.3g)"
              % (family, world, rank, *errors))  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_user_tower_takes_pieces(world_results, case):
    name = "user:%s" % case
    world, per_rank = _scenario(world_results, name)
    _check_split(world, name, per_rank)
    assert_parity(world, name, per_rank, RTOL_EXACT)


def test_a_rank_raising_between_exchanges_raises_on_every_rank(world_results):
    world, per_rank = _scenario(world_results, "raise")
    texts = [re.sub(r"\[rank \d+/\d+\] ", "", res["error_text"]) for res in per_rank]
    assert all(res["error_type"] == "FrameshardError" for res in per_rank), per_rank
    assert len(set(texts)) == 1, texts
    assert "rank 1 failed while running the tower: ValueError: boom in block 1" in texts[0], texts[0]


def test_a_tower_without_pieces_refuses_split_frames(world_results):
    world, per_rank = _scenario(world_results, "refuse")
    for res in per_rank:
        assert "split_frames: expected false for a Python tower that does not take pieces" in res["error_text"], res


def test_calibrate_exchange_gives_every_rank_the_same_positive_latency(world_results):
    world, per_rank = _scenario(world_results, "latency")
    values = [res["us"] for res in per_rank]
    assert len(set(values)) == 1, values
    # Gloo on loopback between processes: tens of microseconds at least, well under a second.
    assert 1.0 < values[0] < 1e6, values


# ------------------------------------------------------------- single process


def _split_config():
    import frameshard

    return frameshard.FrameShardingConfig(enabled=True, split_frames=True)


def test_enable_patches_full_attention_blocks_only_and_disable_restores(solo_group):
    import split_models
    from frameshard import hf

    visual = split_models.build("qwen2_5_vl")  # fullatt_block_indexes [1, 3] of 4 blocks
    group = solo_group  # enable only stores it
    hf.enable(visual, group, _split_config())
    patched = [i for i, b in enumerate(visual.blocks) if "forward" in b.attn.__dict__]
    assert patched == [1, 3], patched
    hf.enable(visual, group, _split_config())  # again: still patched once
    assert [i for i, b in enumerate(visual.blocks) if "forward" in b.attn.__dict__] == [1, 3]
    hf.enable(visual, group, frameshard_config_without_split())  # a config without split: unpatched
    assert not any("forward" in b.attn.__dict__ for b in visual.blocks)
    hf.enable(visual, group, _split_config())
    assert hf.disable(visual)
    assert not any("forward" in b.attn.__dict__ for b in visual.blocks)
    assert "forward" not in visual.__dict__


def frameshard_config_without_split():
    import frameshard

    return frameshard.FrameShardingConfig(enabled=True)


def test_enable_names_the_feature_a_release_lacks(monkeypatch, solo_group):
    from transformers import vision_utils
    from transformers.models.qwen3_vl import modeling_qwen3_vl

    import frameshard
    import split_models
    from frameshard import hf

    visual = split_models.build("qwen3_vl")
    # A release whose forward derives its positions itself instead of through vision_utils.
    monkeypatch.setattr(modeling_qwen3_vl, "get_vision_position_ids", lambda *a, **k: None)
    with pytest.raises(frameshard.FrameshardError, match="calling vision_utils.get_vision_position_ids"):
        hf.enable(visual, solo_group, _split_config())
    monkeypatch.undo()
    # A helper without precomputed geometry (no kwargs parameter).
    monkeypatch.setattr(vision_utils, "get_vision_interpolation_indices_and_weights", lambda grid: None)
    with pytest.raises(
        frameshard.FrameshardError, match=r"get_vision_interpolation_indices_and_weights\(\.\.\., kwargs=\)"
    ):
        hf.enable(visual, solo_group, _split_config())
    monkeypatch.undo()
    visual.config._attn_implementation = "flash_attention_2"
    with pytest.raises(frameshard.FrameshardError, match="split_frames: expected an eager or sdpa"):
        hf.enable(visual, solo_group, _split_config())
    assert not any("forward" in b.attn.__dict__ for b in visual.blocks)
    # Without split_frames the same module is accepted as before.
    hf.enable(visual, solo_group, frameshard_config_without_split())
    assert hf.disable(visual)


def test_takes_pieces_needs_both_keyword_parameters():
    from frameshard._shard import takes_pieces
    from split_worker import UserTower

    assert takes_pieces(lambda pv, grid, cu, *, pieces, exchange: pv)
    assert takes_pieces(UserTower())  # an nn.Module: its forward's signature
    assert not takes_pieces(lambda pv, grid, cu: pv)
    assert not takes_pieces(lambda pv, grid, cu, **kwargs: pv)  # a bare **kwargs does not count
    assert not takes_pieces(lambda pv, grid, cu, *, pieces: pv)


def test_a_piece_tower_declares_its_exchanges_per_call_as_an_int():
    import frameshard
    from frameshard import _shard

    class Tower:
        def __init__(self, n):
            self.exchanges_per_call = n

    assert _shard.exchanges_per_call(Tower(3)) == 3
    assert _shard.exchanges_per_call(object()) == 0
    for bad in (-1, 2.0, True):
        with pytest.raises(
            frameshard.FrameshardError, match=re.escape("exchanges_per_call to be an int >= 0, got %r" % bad)
        ):
            _shard.exchanges_per_call(Tower(bad))
