"""A torch DeviceMesh wherever frameshard takes a group (issue 35): hf.enable with a 1-D mesh and
with a ("dp", "cp") mesh under FSDP2 over the same mesh, hf.context_parallel and
calibrate_exchange with a mesh, and the errors a wrong mesh gets, alike on every rank.

Multi-process (Gloo, tests/python/device_mesh_worker.py): world 2 and world 4, float64, against
the unsharded model on the same rank.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import RTOL_HF, assert_parity, run_world, scenario  # noqa: E402


@pytest.fixture(scope="module")
def world2():
    return 2, run_world("device_mesh_worker.py", 2)


def test_a_one_dimensional_device_mesh_gives_the_unsharded_features_and_gradients(world2):
    world, per_rank = scenario(world2, "hf_1d")
    assert_parity(world, "device mesh 1-D qwen2_5_vl", per_rank, RTOL_HF)


def test_context_parallel_takes_a_device_mesh(world2):
    world, per_rank = scenario(world2, "cp_1d")
    assert_parity(world, "device mesh context_parallel", per_rank, RTOL_HF)
    assert all(res["cp"] == world for res in per_rank)


def test_calibrate_exchange_takes_a_device_mesh(world2):
    _, per_rank = scenario(world2, "calibrate_exchange")
    values = per_rank[0]["all"]
    assert values[0] >= 0 and all(v == values[0] for v in values), values


def test_calibrate_exchange_with_different_arguments_raises_at_once_on_every_rank(world2):
    _, per_rank = scenario(world2, "calibrate_disagree")
    for rank, res in enumerate(per_rank):
        assert "calibrate_exchange: [rank %d/2] ranks disagree on layers: rank 0 has 1, rank 1 has 2" % rank in (
            res["message"] or ""
        ), res
        assert res["seconds_to_raise"] < 20, res  # the group's timeout is 120 s


def test_a_wrong_mesh_or_group_is_refused_alike_on_every_rank(world2):
    world, per_rank = scenario(world2, "errors")
    first = per_rank[0]["messages"]
    assert all(res["messages"] == first for res in per_rank), [res["messages"] for res in per_rank]
    no_dp, other_name, cp_size, text, number, obj = first
    assert "expected a DeviceMesh with dimensions 'dp' and 'cp'" in no_dp and "1-D DeviceMesh (cp=2)" in no_dp
    assert other_name is None  # a 1-D mesh is the CP group, whatever its name
    assert "expected cp_size equal to the DeviceMesh's cp size 2, got 3" in cp_size
    assert "as the group, got a str" in text and "frameshard.hf.enable" in text
    assert "frameshard.hf.context_parallel" in number and "got a int" in number
    assert "frameshard.shard_vision" in obj and "got a object" in obj


@pytest.fixture(scope="module")
def world4():
    return 4, run_world("device_mesh_worker.py", 4)


def test_a_dp_cp_device_mesh_with_fsdp2_over_it_gives_the_unsharded_gradients(world4):
    world, per_rank = scenario(world4, "hf_2d_fsdp2")
    assert_parity(world, "device mesh dp x cp + FSDP2", per_rank, RTOL_HF)
    assert [res["text_only"] for res in per_rank] == [False, False, True, True]


# The loss scale context_parallel must find for each way of holding the model (dp = world / 2,
# cp = 2): FSDP2 / DDP averaging over the dp x cp ranks need cp; a divide factor of dp needs 1.
EXPECTED_SCALE = {"fsdp2_flat": 2.0, "hsdp": 2.0, "fsdp2_divide": 1.0, "ddp": 2.0, "ddp_after": 2.0, "fsdp2_cp": 2.0}


@pytest.mark.parametrize("world_fixture", ["world2", "world4"])
def test_context_parallel_gives_the_unsharded_gradients_under_fsdp2_and_ddp(world_fixture, request):
    world, per_rank = scenario(request.getfixturevalue(world_fixture), "cp_wrappers")
    for rank, res in enumerate(per_rank):
        wrappers = res["wrappers"]
        expected = set(EXPECTED_SCALE) - ({"fsdp2_cp"} if res["dp"] > 1 else set()) | {"ddp_dp"}
        assert set(wrappers) == expected, (rank, sorted(wrappers))
        for kind, got in wrappers.items():
            if kind == "ddp_dp":  # DDP over dp alone never sums the CP shares: refused, not 1/cp
                assert "expected the gradient reduction to include this rank's CP group" in got.get("error", ""), got
                assert "DistributedDataParallel over ranks" in got["error"], got
                continue
            assert "error" not in got, (kind, got)
            assert got["loss_scale"] == EXPECTED_SCALE[kind], (kind, got)
            assert got["grad_diff"] <= 1e-6 * max(1.0, got["grad_scale"]), (world, rank, kind, got)
            print(
                "wrapper %-13s world %d rank %d: loss scale %g, grads max diff %.3g (scale %.3g)"
                % (kind, world, rank, got["loss_scale"], got["grad_diff"], got["grad_scale"])
            )
