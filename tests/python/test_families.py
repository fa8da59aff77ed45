"""frameshard.hf.enable on the families beyond Qwen-VL: GLM-4V, Nemotron Omni (RADIO), PaddleOCR-VL.

Single-process: GLM-4V's one grid row per frame and the unsupported-model error naming the new
families. Computed in the worker (which builds transformers models anyway; the pytest process
builds none): the cost-model dimensions of a GLM-4V vision config, the Nemotron
Omni image cost (RADIO's prefix tokens and the projector added to the C++ FLOP model of its
blocks) and what enable stores and refuses for it (a mesh).

Multi-process (Gloo, world 2 and 3; one launch of tests/python/families_worker.py per world size
serves every scenario): float64 sharded against replicated outputs and SUM-all-reduced parameter
gradients with rank-specific losses, for a tiny random Glm4vForConditionalGeneration
(get_image_features, get_video_features and the model's logits), the Glm4vMoeVisionModel alone,
a NemotronH_Omni_Reasoning_V3 (get_image_features and logits), also with fewer images than
ranks (a rank encodes a 2 x 2 placeholder image), and a PaddleOCRVLForConditionalGeneration
(get_image_features on [patches, C, p, p] pixel rows, and logits); every vision call saw only
the rank's planned rows (floor frames included); an odd Nemotron Omni grid raises the same
FrameshardError on every rank (transformers' own pixel shuffle fails on it with a RuntimeError);
a cp_size the group does not have raises the same error on every rank (Nemotron Omni, GLM-4V).

As trainers hold the models (world 2 only: CI's time; families_worker.scenarios_at), for each of
GLM-4V, Nemotron Omni and PaddleOCR-VL (fm.TRAINING x fm.TRAIN_FAMILIES, "<training>:<family>"):
one training step (the model's forward on a prompt with every image, a rank-specific loss over the
logits, backward) sharded against replicated, under DistributedDataParallel of the whole model,
FSDP2 fully_shard on every vision block, the vision part and the whole model (every parameter a
DTensor), torch.compile (eager backend: GLM-4V's and PaddleOCR-VL's vision part assigned back,
Nemotron Omni's whole model; aot_eager only when named, FRAMESHARD_TEST_SCENARIOS), HF
gradient_checkpointing_enable() and bf16 parameters; the vision call saw only the rank's rows and
disable restored the model. FRAMESHARD_TEST_SCENARIOS=a,b (or "all", the by-hand ones too) runs
only those scenarios.

Tolerance: harness.RTOL_HF = 1e-5 relative to max(1, the largest replicated value). In a float64
model GLM-4V computes its rotary tables, its interpolated position embedding (grid_sample) and
the eager softmax in float32, RADIO its position-embedding interpolation, Nemotron's projector
its RMSNorm and PaddleOCR-VL its rotary tables in float32, so a float64 summation-order
difference between the sharded and replicated runs can flip a float32 rounding: measured up to
1.4e-5 absolute on gradients of scale 140 (1e-7 relative), outputs within 6e-15; the training
scenarios' gradients within 2.4e-6 of scale 67 (Nemotron Omni's logits are float32, NemotronH's
lm_head casts them: within 6e-8 under aot_eager, else equal). bf16 parameters: test_wrappers.py's
rule, no fixed bound -- both runs against the float64 step of the same rounded weights and inputs,
the sharded run's error at most LOWP_ERR_FACTOR (1.5) times the replicated run's and
sharded - replicated at most 2.5 times it (measured: outputs equal, gradient error ratio 0.48-1.0;
the replicated error is bf16's own, 0.7-1.2 % of the gradient scale).

Run: `.venv/bin/python -m pytest tests/python/test_families.py` after installing the package (or
with PYTHONPATH=build/python-dev), or through ctest (python.families).
"""

import os
import sys

import pytest
import torch

import frameshard
from frameshard import hf
from frameshard.hf import _family

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_models as fm  # noqa: E402
from harness import RTOL_HF, assert_no_less_accurate, assert_parity, run_selected, scenario_or_skip  # noqa: E402

# ------------------------------------------------------------- single process


def test_glm4v_takes_one_grid_row_per_frame():
    grid = torch.tensor([[1, 4, 6], [3, 2, 2]])
    glm4v, qwen2_vl = _family.get("glm4v"), _family.get("qwen2_vl")
    assert _family.tower_grid(glm4v, grid).tolist() == [[1, 4, 6], [1, 2, 2], [1, 2, 2], [1, 2, 2]]
    assert _family.tower_grid(qwen2_vl, grid) is grid  # Qwen towers take (t, h, w) rows as they are


def test_unsupported_model_error_names_the_families(solo_group):
    with pytest.raises(frameshard.FrameshardError) as err:
        hf.enable(torch.nn.Linear(2, 2), group=solo_group)
    text = str(err.value)
    names = ("Qwen2VisionTransformerPretrainedModel", "Glm4vVisionModel", "Glm4vMoeVisionModel")
    names += ("NemotronH_Omni_Reasoning_V3", "PaddleOCRVLModel")
    for name in names:
        assert name in text, (name, text)


# ------------------------------------------------------------- multi process


@pytest.fixture(scope="module", params=[2, 3], ids=lambda w: "world%d" % w)
def world_results(request):
    # FRAMESHARD_TEST_SCENARIOS=a,b (or "all": the by-hand ones too) runs only those.
    return request.param, run_selected("families_worker.py", request.param)


def _scenario(world_results, name):
    return scenario_or_skip(world_results, name, "families_worker.scenarios_at")


def test_glm4v_tower_dims_and_cost(world_results):
    _, per_rank = _scenario(world_results, "static")
    res = per_rank[0]
    dims = res["glm_dims"]
    # GLM's blocks: a SwiGLU MLP out_hidden_size wide; one merger to out_hidden_size.
    assert (dims["name"], dims["depth"], dims["hidden"], dims["intermediate"], dims["gated_mlp"]) == (
        "glm4v", 2, 32, 24, True
    )  # fmt: skip
    assert (dims["mergers"], dims["merge_size"], dims["out_hidden"]) == (1, 2, 24)
    # cost.h: b = depth * (2d + 1.5 f) + (d m^2 + o) / 2, over the full-attention layers.
    assert res["glm_b"] == pytest.approx((2 * (64 + 1.5 * 24) + (32 * 4 + 24) / 2) / 2)
    assert res["moe_dims_equal"] and res["moe_family"] == "glm4v_moe"
    assert all(r["family"] == "glm4v" for r in _scenario(world_results, "glm4v")[1])


def test_omni_image_cost_counts_prefix_tokens_and_projector(world_results):
    _, per_rank = _scenario(world_results, "static")
    res = per_rank[0]
    dims, cost = res["omni_dims"], res["omni_cost"]
    # RADIO's blocks carry the prefix tokens; the projector after the pixel shuffle is the merger.
    assert (dims["name"], dims["prefix_tokens"], dims["mergers"], dims["merge_size"]) == (
        "radio", fm.OMNI_PREFIX, 1, 2
    )  # fmt: skip
    assert (dims["merger_hidden"], dims["out_hidden"]) == (48, 32)
    assert res["radio_b"] == 2 * 32 + 128  # RADIO's blocks, plain MLP: 2d + f per layer
    s, prefix = cost["seconds_per_unit"], fm.OMNI_PREFIX
    assert s > 0  # the auto policy reads it as it reads every FLOP model
    # The projector on p/4 shuffled tokens: (4d * 48 + 48 * 32) / 4 multiply-adds per patch, in
    # units of 2 * d * depth.
    e = (128 * 48 + 48 * 32) / 4 / (2 * 32 * 2)
    a, b, c = cost["a"], cost["b"], cost["c"]
    for p in (4, 16, 64):
        want = (p + prefix) ** 2 + res["radio_b"] * (p + prefix) + e * p
        assert a * p * p + b * p + c == pytest.approx(want, rel=1e-12), p
    assert c > 0  # a 2 x 2 image still costs its prefix tokens
    # enable plans with the FLOP model of these dims; disable restores get_image_features.
    assert res["stored_alpha"] == "auto" and res["patched"] and res["restored"]
    assert res["mesh"]["raised"] == "FrameshardError"
    assert "expected one CP group for a nemotron_h_omni model" in res["mesh"]["message"]


@pytest.mark.parametrize("name", ["glm4v", "glm4v_moe", "omni", "omni_few", "paddleocr"])
def test_parity_and_local_rows(world_results, name):
    world, per_rank = _scenario(world_results, name)
    assert_parity(world, name, per_rank, RTOL_HF)
    for rank, res in enumerate(per_rank):
        assert res["enabled"] and res["disabled"] and res["params_with_grad"] > 0, (name, rank)
        # Every vision call ran on exactly the rows the plan gives this rank (real, floor and
        # placeholder frames); with more images than ranks its real rows are a part of the batch.
        assert res["seen_rows"] == res["plan_rows"], (name, world, rank, res["seen_rows"], res["plan_rows"])
        if name != "omni_few":
            assert all(s < t for s, t in zip(res["plan_real_rows"], res["total_rows"], strict=False)), (name, rank)
    for i, total in enumerate(per_rank[0]["total_rows"]):
        assert sum(r["plan_real_rows"][i] for r in per_rank) == total, (name, i)
    if name == "glm4v":
        assert per_rank[0]["outputs"] == ["image", "logits", "video"]
        # Floor frames (one (count, h, w) local grid row) ran through GLM's per-frame grid.
        assert all(r["plan_pad"][1] > 1 for r in per_rank)
    if name.startswith("omni") or name == "paddleocr":
        for res in per_rank:
            # The C++ FLOP model of the blocks with the projector as the merger (and, for
            # Nemotron Omni, RADIO's prefix tokens).
            paddle = "auto (paddleocr_vl depth 2, width 32, mlp 64, 1 merger"
            omni = "auto (radio depth 2, width 32, mlp 128, 1 merger of width 48 to 32, 5 prefix tokens"
            want = omni if name.startswith("omni") else paddle
            assert res["cost_model"].startswith(want), res["cost_model"]
            assert all(s == res["tokens"] for s in res["split_sizes"]), res["split_sizes"]
    if name == "omni_few":
        # world - 1 images: exactly one rank encoded the 2 x 2 placeholder image, and only it.
        dummies = [r["plan_dummy"][0] for r in per_rank]
        assert dummies.count(1) == 1 and dummies.count(0) == world - 1, dummies
        assert [r["seen_rows"][0] for r in per_rank if r["plan_dummy"][0]] == [4]


def test_omni_odd_grid_raises_on_every_rank(world_results):
    world, per_rank = _scenario(world_results, "omni_odd")
    messages = {r["sharded"]["message"] for r in per_rank}
    assert len(messages) == 1, messages
    for res in per_rank:
        assert res["sharded"]["raised"] == "FrameshardError", res
        assert "expected even image_grid_hw sides" in res["sharded"]["message"]
        assert "got [3, 4] at image 1" in res["sharded"]["message"]
        # transformers itself cannot pixel-shuffle an odd grid (it does not pad).
        assert res["replicated"]["raised"] == "RuntimeError", res


def test_group_size_mismatch_raises_on_every_rank(world_results):
    world, per_rank = _scenario(world_results, "mismatch")
    want = "cp_size=%d does not match its process group (size %d)" % (world + 1, world)
    for family in ("omni", "glm"):
        assert len({r[family]["message"] for r in per_rank}) == 1, family
        for res in per_rank:
            assert res[family]["raised"] == "FrameshardError" and want in res[family]["message"], res


@pytest.mark.parametrize("family", fm.TRAIN_FAMILIES)
@pytest.mark.parametrize("training", fm.TRAINING)
def test_training_parity(world_results, training, family):
    name = "%s:%s" % (training, family)
    world, per_rank = _scenario(world_results, name)
    # Nemotron Omni's logits are float32 in any model (NemotronH's lm_head output is cast).
    want_dtype = "torch.float32" if family == "omni" else "torch.bfloat16" if training == "bf16" else "torch.float64"
    for rank, res in enumerate(per_rank):
        assert res["enabled"] and res["disabled"], (name, rank)
        # The model's forward made one vision call, on exactly this rank's planned rows, a part
        # of the batch (a compiled or wrapped model still runs the sharded path).
        assert res["path"] == "sharded", (name, rank, res["path"])
        assert res["seen_rows"] == res["plan_rows"], (name, world, rank, res["seen_rows"], res["plan_rows"])
        assert res["plan_real_rows"] < res["total_rows"], (name, rank)
        # Every parameter compared; all but Nemotron Omni's video patch projection trained.
        assert res["params"] == res["model_params"], (name, res["params"], res["model_params"])
        assert res["params_with_grad"] == res["params"] - (family == "omni"), (name, res["params_with_grad"])
        assert res["dtype"] == want_dtype, (name, res["dtype"])
        if training == "hf_ckpt":
            assert res["checkpointing"], name
        if training == "ddp":
            assert res["held_class"] == "DistributedDataParallel", res
        if training == "fsdp2":
            # fully_shard derived the vision part's class, and every parameter is a DTensor shard.
            assert res["vision_class"].startswith("FSDP"), res["vision_class"]
            assert res["dtensor_params"] == res["model_params"], res
        if training.startswith("compile"):
            assert res["compiled_class"] == "OptimizedModule" and res["graphs"] > 0, res
    if training != "bf16":
        assert_parity(world, name, per_rank, RTOL_HF)
        return
    for rank, res in enumerate(per_rank):
        assert_no_less_accurate(name, world, rank, res)
