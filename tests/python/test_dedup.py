"""FrameShardingConfig(dedup=True): each distinct frame encoded once on GRPO-shaped batches, in the
CP group (shard_vision, owner routing, media_keys, transformers Qwen2-VL through hf.enable) and
across the replicas of a DP x CP mesh.

Multi-process (Gloo over a FileStore, one launch of tests/python/dedup_worker.py per world, by
harness.py): world 2 (CP 2, and the mesh DP 2 x CP 1) and, with FRAMESHARD_TEST_WORLD4=1, world 4
(the mesh DP 2 x CP 2), float64.
Each scenario compares the dedup run with the run without dedup -- outputs and every parameter
gradient after a SUM all-reduce, rank-specific losses -- and counts the rows the towers saw.

Run: `.venv/bin/python -m pytest tests/python/test_dedup.py` after installing the package (or with
PYTHONPATH=build/python-dev, scripts/python-dev.sh), or through ctest (label `python`).
"""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import frameshard  # noqa: E402
from harness import RTOL_HF, RTOL_TORCH, assert_parity, run_world, scenario  # noqa: E402
from worker_common import compare  # noqa: E402


@pytest.fixture(scope="module")
def world2():
    return 2, run_world("dedup_worker.py", 2)


@pytest.fixture(scope="module")
def world4():
    # DP 2 x CP 2 in Python is opt-in (FRAMESHARD_TEST_WORLD4=1): four more processes in a CI tier
    # already at its budget; the C++ dist tests run the mesh's dedup at DP 2 x CP 2 and DP 3 x CP 2.
    if os.environ.get("FRAMESHARD_TEST_WORLD4") != "1":
        return None
    return 4, run_world("dedup_worker.py", 4)


def test_a_grpo_batch_matches_the_run_without_dedup_and_encodes_each_frame_once(world2):
    world, per_rank = scenario(world2, "cp")
    assert_parity(world, "dedup cp", per_rank, RTOL_TORCH)
    # The two ranks' towers together saw A, B and V once each.
    assert sum(r["seen_rows"] for r in per_rank) == per_rank[0]["distinct_rows"], per_rank
    counts = per_rank[0]["plan"]
    assert (counts["distinct_units"], counts["units"]) == (4, 9), counts


def test_owner_routing_delivers_each_row_to_every_owner_of_its_uses(world2):
    world, per_rank = scenario(world2, "cp_owner")
    assert_parity(world, "dedup owner", per_rank, RTOL_TORCH)
    assert sum(r["seen_rows"] for r in per_rank) == per_rank[0]["distinct_rows"]


def test_media_keys_instead_of_the_pixel_hash(world2):
    world, per_rank = scenario(world2, "cp_media_keys")
    assert_parity(world, "dedup media keys", per_rank, RTOL_TORCH)
    assert sum(r["seen_rows"] for r in per_rank) == per_rank[0]["distinct_rows"]


def test_a_group_spread_over_replicas_is_encoded_once_in_the_mesh(world2, world4):
    for results in (world2, world4):
        if results is None:
            continue
        world, per_rank = scenario(results, "mesh")
        assert_parity(world, "dedup mesh dp2 cp%d" % (world // 2), per_rank, RTOL_TORCH)
        # Both replicas' A, B and V, once in the whole mesh.
        assert sum(r["seen_rows"] for r in per_rank) == per_rank[0]["distinct_rows"], per_rank
        assert per_rank[0]["plan"]["distinct_units"] == 4 and per_rank[0]["plan"]["units"] == 8


def test_transformers_qwen2_vl_through_hf_enable(world2):
    world, per_rank = scenario(world2, "hf_grpo")
    assert_parity(world, "dedup hf qwen2_vl", per_rank, RTOL_HF)
    seen = sum(r["seen_rows"] for r in per_rank)
    assert seen == per_rank[0]["distinct_rows"] < per_rank[0]["total_rows"], per_rank


@pytest.mark.parametrize("path", ["cp_replicated", "mesh_sharded", "mesh_replicated"])
def test_every_path_returns_one_block_per_use_through_hf_enable(world2, path):
    """Qwen2-VL through hf.enable with dedup, below the thresholds on the CP group and on the
    DP 2 x CP 1 mesh (each rank its own batch), and sharded on the mesh."""
    world, per_rank = scenario(world2, "hf_" + path)
    assert_parity(world, "dedup hf " + path, per_rank, RTOL_HF, path=path.split("_")[1])


def test_split_frames_with_dedup_in_a_transformers_tower(world2):
    world, per_rank = scenario(world2, "hf_split")
    assert_parity(world, "dedup hf split qwen3_vl", per_rank, RTOL_HF)
    assert per_rank[0]["split"], per_rank[0]
    # Rows of pieces exchanged for attention are not tower input: the towers saw the page once.
    assert sum(r["seen_rows"] for r in per_rank) == per_rank[0]["distinct_rows"], per_rank


def test_disagreeing_keys_raise_the_same_error_on_every_rank(world2):
    _, per_rank = scenario(world2, "errors")
    first = [r["messages"] for r in per_rank]
    for messages in first:
        assert messages[0] is not None and "dedup keys" in messages[0], messages
        assert "expected config.dedup True with media_keys" in messages[1], messages
        assert "media_keys: expected str, bytes, int or a tuple" in messages[2], messages
    # The same text after the rank prefix on every rank.
    assert len({m[0].split("] ", 1)[1] for m in first}) == 1, first


def test_frame_keys_follow_the_pixels():
    pixels = torch.randn(16 * 3, 12)
    pixels[16:32] = pixels[:16]
    keys = frameshard.frame_keys(pixels, [[1, 4, 4], [1, 4, 4], [1, 4, 4]])
    assert keys[0] == keys[1] != keys[2]
    assert all(isinstance(k, tuple) and len(k) == 2 for k in keys)
    pixels[20, 3] += 1e-6
    assert frameshard.frame_keys(pixels, [[1, 4, 4]] * 3)[1] != keys[1]


def _repeated_images(pixels, grid, order):
    """The images of `grid` (their pixel rows split from `pixels`) in `order`, as one batch."""
    sizes = torch.as_tensor(grid).prod(-1).tolist()
    images = list(pixels.split(sizes))
    return torch.cat([images[i] for i in order]), torch.as_tensor(grid)[order]


def _one_rank_models():
    """(name, model, features call) of one model per way hf.enable shards: at the vision module
    (Qwen2-VL, Qwen2.5-VL, Qwen3-VL with DeepStack, GLM-4.1V) and at get_image_features
    (PaddleOCR-VL); float64."""
    import family_models
    import hf_models

    out = []
    for family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        model, _, inputs = hf_models.build(family)
        out.append((family, model.double(), inputs["pixel_values"].double(), inputs["image_grid_thw"]))
    glm, _ = family_models.glm4v_model()
    grid = torch.tensor(family_models.GLM_GRID)
    out.append(("glm4v", glm, family_models.pixels(grid, family_models.GLM_FEATURES), grid))
    paddle = family_models.paddleocr_model()
    grid = torch.tensor([[1, 4, 6], [1, 2, 2], [1, 6, 4]])
    out.append(("paddleocr", paddle, family_models.pixels(grid, 3 * 4 * 4).reshape(-1, 3, 4, 4), grid))
    return out


def test_every_family_returns_one_block_per_use_on_one_rank(solo_group):
    """Issue 46's first bug: with dedup on a one-rank group (the replicated path) the vision call
    returned each distinct image's rows once, and transformers' get_image_features then failed to
    split them per image. Every family, outputs and gradients against the model without
    frameshard."""
    from frameshard import hf

    config = frameshard.FrameShardingConfig(enabled=True, dedup=True)
    for name, model, pixels, grid in _one_rank_models():
        order = [0, 0, 1, 1, 2, 0]  # A, A, B, B, C, A
        pv, g = _repeated_images(pixels.flatten(1) if pixels.dim() > 2 else pixels, grid, order)
        pv = pv.reshape(-1, *pixels.shape[1:])

        def features(model=model, pv=pv, g=g):
            model.zero_grad()
            out = model.model.get_image_features(pv, g)
            rows = torch.cat(list(out.pooler_output))
            (rows * torch.linspace(-1, 1, rows.numel(), dtype=rows.dtype).view_as(rows)).sum().backward()
            return rows.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

        want, want_grads = features()
        hf.enable(model, solo_group, config)
        try:
            got, got_grads = features()
        finally:
            hf.disable(model)
        assert got.shape == want.shape, (name, got.shape, want.shape)
        diff, scale = compare({"rows": got}, {"rows": want})
        assert diff <= RTOL_HF * max(1.0, scale), (name, diff)
        diff, scale = compare(got_grads, want_grads)
        assert diff <= RTOL_HF * max(1.0, scale), (name, diff)
