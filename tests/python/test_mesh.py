"""frameshard.Mesh: shard_vision and hf.enable over a data x context-parallel mesh (mesh_dims
[dp, cp]), where each DP replica brings its own batch and the vision work of all of them is
balanced over every rank.

Multi-process (Gloo over a FileStore, one launch of tests/python/mesh_worker.py per world, by
harness.py): world 2 as DP 2 x CP 1 and world 4 as DP 2 x CP 2, float64. Against the per-replica
run (each rank encodes its own replica's batch; a text-only replica none), with the gradients
SUM-all-reduced over the whole mesh: this replica's outputs and every parameter gradient of the
pure-torch FrameTower, with two different batches, with one replica text-only, with owner routing
and on the replicated path (a text-only replica then gets None); and of a tiny transformers
Qwen3-VL through hf.enable(..., mesh=...), the text-only replica joining with
hf.join_without_media. Mesh arguments that cannot work raise FrameshardError on every rank.

Run: `.venv/bin/python -m pytest tests/python/test_mesh.py` after installing the package (or with
PYTHONPATH=build/python-dev, scripts/python-dev.sh), or through ctest
(tests/python/package_test.sh, label `python`).
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import RTOL_HF, RTOL_TORCH, assert_parity, run_world, scenario  # noqa: E402


@pytest.fixture(scope="module", params=[2, 4], ids=lambda w: "dp2_cp%d" % (w // 2))
def world_results(request):
    return request.param, run_world("mesh_worker.py", request.param)


def test_two_replicas_batches_balanced_over_the_mesh(world_results):
    world, per_rank = scenario(world_results, "torch_two_batches")
    assert_parity(world, "mesh two batches", per_rank, RTOL_TORCH)
    for _rank, res in enumerate(per_rank):
        assert res["plan_world"] == world, res
        # The tower ran once, on this rank's share of both replicas' frames.
        assert len(res["seen_rows"]) == 1, res["seen_rows"]
    # Both replicas' rows, split over every rank: no rank encodes a whole replica's batch.
    total = sum(r["seen_rows"][0] for r in per_rank)
    cp = world // 2
    assert total == sum(r["replica_rows"] for r in per_rank[::cp]), per_rank
    assert max(r["seen_rows"][0] for r in per_rank) < max(r["replica_rows"] for r in per_rank)


def test_a_text_only_replica_encodes_the_other_replicas_frames(world_results):
    world, per_rank = scenario(world_results, "torch_text_only")
    assert_parity(world, "mesh text-only replica", per_rank, RTOL_TORCH)
    for rank, res in enumerate(per_rank[world // 2 :], start=world // 2):
        assert res["replica_rows"] == 0 and res["seen_rows"][0] > 0, (rank, res)
        assert res["rows"] == [0, 0], (rank, res)  # [0, hidden] outputs of both tower outputs


def test_owner_routed_rows_on_the_mesh(world_results):
    world, per_rank = scenario(world_results, "torch_owner")
    assert_parity(world, "mesh owner", per_rank, RTOL_TORCH)


def test_the_replicated_mesh_path_gives_a_text_only_replica_none(world_results):
    world, per_rank = scenario(world_results, "torch_replicated")
    assert_parity(world, "mesh replicated", per_rank, RTOL_TORCH, path="replicated")
    for rank, res in enumerate(per_rank):
        text_only = rank >= world // 2
        assert res["outputs"] == ([] if text_only else ["out_0", "out_1"]), (rank, res)
        assert res["seen_rows"] == ([] if text_only else [res["replica_rows"]]), (rank, res)


def test_policy_auto_keeps_equal_batches_on_their_own_replicas_ranks(world_results):
    world, per_rank = scenario(world_results, "torch_auto_equal")
    assert_parity(world, "mesh auto, equal batches", per_rank, RTOL_TORCH)
    cp = world // 2
    for rank, res in enumerate(per_rank):
        assert res["mesh_mode"] == "cp-only", (rank, res)
        # Each replica's rows stay on its own cp ranks.
        assert sum(r["seen_rows"][0] for r in per_rank[rank // cp * cp :][:cp]) == res["replica_rows"], per_rank


def test_policy_auto_pools_a_straggler_over_the_mesh(world_results):
    world, per_rank = scenario(world_results, "torch_auto_text_only")
    assert_parity(world, "mesh auto, straggler", per_rank, RTOL_TORCH)
    assert all(r["mesh_mode"] == "mesh" and r["mesh_gain"] > 0.05 for r in per_rank), per_rank
    for rank, res in enumerate(per_rank[world // 2 :], start=world // 2):
        assert res["seen_rows"][0] > 0, (rank, res)  # the text-only replica encodes frames


def test_hf_enable_with_a_mesh_and_a_text_only_replica(world_results):
    world, per_rank = scenario(world_results, "hf_qwen3_vl")
    assert_parity(world, "mesh hf qwen3_vl", per_rank, RTOL_HF)
    assert per_rank[0]["params_with_grad"] > 10, per_rank[0]
    for rank, res in enumerate(per_rank):
        # One vision call per rank; the text-only replica's ranks encoded replica 0's frames.
        assert len(res["seen_rows"]) == 1 and res["seen_rows"][0] > 0, (rank, res)


def test_mesh_arguments_are_refused_alike_on_every_rank(world_results):
    world, per_rank = scenario(world_results, "errors")
    first = per_rank[0]["messages"]
    assert "expected group and cp_size unset with a mesh" in first[0], first
    assert "or mesh=frameshard.Mesh(group, dp, cp) with mesh_dims [dp, cp], got a ProcessGroup" in first[1], first
    assert "frameshard.Mesh: expected dp a positive integer, got 0" in first[2], first
    assert "expected a mesh group of dp * cp = %d ranks" % (2 * world) in first[3], first
    for res in per_rank:
        assert res["tower_calls"] == 0, res
        strip = [m.split("] ", 1)[-1] if m else m for m in res["messages"]]
        assert strip == [m.split("] ", 1)[-1] if m else m for m in first], res["messages"]
