"""cost_alpha="online" (frameshard/_online.py, include/frameshard/online_cost.h): the plan learns
from the run's own tower times, identically on every rank.

Multi-process: tests/python/online_worker.py runs both scenarios in one launch of 2 Gloo ranks.
The burning tower's time is CPU time it burns on purpose (a per-frame constant FLOPs miss), so
the fit is checked against a known truth whatever the machine's load.
"""

import gc
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import frameshard  # noqa: E402
from harness import RTOL_HF, assert_no_less_accurate, assert_parity, run_selected, scenario  # noqa: E402
from online_worker import BACKWARD, CALLS, FRAME_S  # noqa: E402

WORLD = 2


@pytest.fixture(scope="module")
def world_results():
    return WORLD, run_selected("online_worker.py", WORLD)


def test_the_first_calls_plan_with_flops_then_a_fit_in_seconds(world_results):
    _, per_rank = scenario(world_results, "learns")
    models = [c["cost_model"] for c in per_rank[0]["calls"]]
    # Calls 1 and 2 warm up; call 3 plans with the fit of calls 1 and 2.
    assert all(m.startswith("online (") for m in models[:2]), models
    assert all(m.startswith("online: a=") for m in models[2:]), models


def test_the_fit_moves_frames_off_the_rank_flops_left_slowest(world_results):
    _, per_rank = scenario(world_results, "learns")
    calls = per_rank[0]["calls"]
    # FLOPs: the image alone on rank 0, the 12 small frames on rank 1 (each costs 1.5 ms + rows).
    assert calls[0]["assignment"] == [0] + [1] * 12, calls[0]
    last = calls[-1]["assignment"]
    assert 3 <= last.count(0) - 1 <= 7, last  # the fit balances: about 5 small frames move


def test_the_fit_times_forward_and_backward(world_results):
    _, per_rank = scenario(world_results, "learns")
    state = per_rank[0]["state"]
    assert state["fitted"] and state["calls"] == CALLS - 1, state
    # The per-frame constant: forward FRAME_S plus backward BACKWARD * FRAME_S (the forward alone
    # would be a third of it).
    c = float(state["fit"].split(" c=")[1].split()[0])
    assert 0.7 * (1 + BACKWARD) * FRAME_S < c < 1.3 * (1 + BACKWARD) * FRAME_S, state["fit"]
    ratio = state["predicted_slowest_seconds"] / state["measured_slowest_seconds"]
    assert 0.7 < ratio < 1.3, state


def test_every_rank_plans_and_fits_bitwise_alike(world_results):
    for name in ("learns", "qwen3"):
        _, per_rank = scenario(world_results, name)
        assert all(r["state"]["fit"] == per_rank[0]["state"]["fit"] for r in per_rank), name
    _, per_rank = scenario(world_results, "learns")
    assert per_rank[0]["calls"] == per_rank[1]["calls"]


def test_the_fit_is_written_as_a_calibration_file_the_next_run_starts_from(world_results):
    _, per_rank = scenario(world_results, "learns")
    assert per_rank[0]["text"].strip().splitlines()[-1].startswith("quadratic:")
    assert per_rank[0]["reread"].startswith("calibrated "), per_rank[0]["reread"]


@pytest.mark.parametrize("held", ["qwen3", "qwen3:fsdp2", "qwen3:ddp", "qwen3:compile", "qwen3:mesh", "qwen3:bf16"])
def test_a_transformers_tower_with_split_frames_learns_and_keeps_parity(world_results, held):
    # As trainers hold the tower too: its backward must still be timed (an FSDP2 tower computes
    # with unsharded parameters, a compiled one through its own graph) and the samples shared.
    world, per_rank = scenario(world_results, held)
    assert per_rank[0]["state"]["calls"] == 3, per_rank[0]["state"]
    assert per_rank[0]["state"]["measured_slowest_seconds"] > 0
    assert all(all(r["timed_backward"]) for r in per_rank), [r["timed_backward"] for r in per_rank]
    assert all(r["split"] for r in per_rank), [r["logged"] for r in per_rank]
    if held.endswith(":bf16"):  # no fixed bound in bfloat16: no less accurate than replicated
        assert all(r["dtype"] == "torch.bfloat16" for r in per_rank)
        for rank, res in enumerate(per_rank):
            assert res["path"] == "sharded", (held, rank, res["path"])
            assert_no_less_accurate(held, world, rank, res)
        return
    assert_parity(world, held, per_rank, RTOL_HF)


def test_a_split_calls_samples_count_each_piece_against_its_whole_frame(world_results):
    # The sample the ranks share (sum p^2, sum p, frames, calls, split, K/V rows, ...): a piece
    # counts its queries against its whole frame and the rows it receives, as the planner costs it.
    _, per_rank = scenario(world_results, "qwen3")
    received = 0
    for r in per_rank:
        assert r["samples"], "no split call on this rank: %s" % r["logged"]
        for sample, want in r["samples"]:
            assert [sample[0], sample[1], sample[2], sample[5]] == want
            assert sample[3:5] == [1.0, 1.0]  # one call, split
            received += sample[5]
    assert received > 0


def test_write_online_cost_names_what_it_expected_without_a_caller(tmp_path):
    with pytest.raises(frameshard.FrameshardError, match="expected exactly one cost_alpha='online' caller"):
        frameshard.write_online_cost(tmp_path / "x.txt")


def test_a_collected_tower_takes_its_learner_with_it(solo_group):
    # Learners are kept per caller, by id; CPython reuses the id of a collected object, and a new
    # tower at that address must start afresh, not from another tower's fit.
    class Tower:
        def __call__(self, pv, grid, cu):
            return pv.reshape(-1, 4, pv.shape[1]).sum(1)  # one token per 2 x 2 patches

    config = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0, cost_alpha="online")
    pv, grid = torch.randn(16, 8), [[1, 4, 4]]
    before = len(frameshard.online_costs())
    tower = Tower()
    for _ in range(2):
        frameshard.shard_vision(tower, pv, grid, solo_group, config)
    assert len(frameshard.online_costs()) == before + 1
    del tower
    gc.collect()
    assert len(frameshard.online_costs()) == before
