"""The parity subset run on every supported transformers release besides the pinned one (issue 35):
per family, at world 2, float64 -- `hf.enable` (outputs and gradients against the unsharded model),
split frames (a cut frame) and `hf.context_parallel` (loss, logits and gradients; also with
gather owner and a cut frame: the merge after the split).

CI runs it with scripts/test-transformers-releases.sh on the oldest supported release, on NeMo
Automodel's pin and on the newest (tests/CMakeLists.txt, python.transformers_*); the full suites
run on the pinned release. A family whose classes a release lacks is skipped by name (Nemotron
Omni appeared in transformers 5.18).
"""

import os
import sys

import pytest
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
import split_models  # noqa: E402
from harness import RTOL_HF, assert_parity, run_world, scenario  # noqa: E402

WORLD = 2
CP_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "glm4v")
# context_parallel without and with owner-routed visual rows (the merge after the split, a cut frame)
CP_SCENARIOS = [p + f for f in CP_FAMILIES for p in ("parity_", "owner_split_")]
# families_worker scenarios -> the transformers class they need.
FEATURE_FAMILIES = {"glm4v": "Glm4vForConditionalGeneration", "omni": "NemotronH_Omni_Reasoning_V3",
                    "paddleocr": "PaddleOCRVLForConditionalGeneration"}  # fmt: skip


def _skip_unless(class_name):
    if not hasattr(transformers, class_name):
        pytest.skip("transformers %s has no %s" % (transformers.__version__, class_name))


@pytest.fixture(scope="module")
def enable_results():
    names = ["hf_" + f for f in hf_models.FAMILIES]
    return WORLD, run_world("package_worker.py", WORLD, ["--scenarios=" + ",".join(names)])


@pytest.fixture(scope="module")
def feature_results():
    names = [n for n, cls in FEATURE_FAMILIES.items() if hasattr(transformers, cls)]
    return WORLD, run_world("families_worker.py", WORLD, ["--scenarios=" + ",".join(names)])


@pytest.fixture(scope="module")
def split_results():
    names = ["%s:exact" % f for f in split_models.FAMILIES]
    return WORLD, run_world("split_worker.py", WORLD, ["--scenarios=" + ",".join(names)])


@pytest.fixture(scope="module")
def cp_results():
    return WORLD, run_world("cp_lm_worker.py", WORLD, ["--scenarios=" + ",".join(CP_SCENARIOS)])


def test_the_release_is_supported():
    from frameshard.hf import _compat

    assert _compat.supported(transformers.__version__), (transformers.__version__, _compat.SUPPORTED_TRANSFORMERS)
    print("transformers %s" % transformers.__version__)


@pytest.mark.parametrize("family", hf_models.FAMILIES)
def test_enable(enable_results, family):
    world, per_rank = scenario(enable_results, "hf_" + family)
    assert_parity(world, "%s (transformers %s)" % (family, transformers.__version__), per_rank, RTOL_HF)


@pytest.mark.parametrize("name", sorted(FEATURE_FAMILIES))
def test_enable_other_families(feature_results, name):
    _skip_unless(FEATURE_FAMILIES[name])
    world, per_rank = scenario(feature_results, name)
    assert_parity(world, "%s (transformers %s)" % (name, transformers.__version__), per_rank, RTOL_HF)


@pytest.mark.parametrize("family", split_models.FAMILIES)
def test_split_frames(split_results, family):
    name = "%s:exact" % family
    world, per_rank = scenario(split_results, name)
    assert all(res["split"] and res["pieces"] >= 2 for res in per_rank), [res.get("pieces") for res in per_rank]
    assert_parity(world, "%s (transformers %s)" % (name, transformers.__version__), per_rank, RTOL_HF)


@pytest.mark.parametrize("name", CP_SCENARIOS)
def test_context_parallel(cp_results, name):
    world, per_rank = scenario(cp_results, name)
    first = per_rank[0]
    assert abs(sum(r["local_loss"] for r in per_rank) - first["ref_loss"]) <= 1e-12 + RTOL_HF * abs(first["ref_loss"])
    for rank, res in enumerate(per_rank):
        assert res["logits_diff"] <= RTOL_HF * max(1.0, res["logits_scale"]), (name, rank, res["logits_diff"])
        assert res["grad_diff"] <= RTOL_HF * max(1.0, res["grad_scale"]), (name, rank, res["grad_diff"])
        assert res["restored"], (name, rank)
        if name.startswith("owner_"):  # each rank received exactly its positions' visual rows
            assert res["owner_visual_rows"] == res["local_visual"], (name, rank, res["owner_visual_rows"])
    print("cp %s world %d (transformers %s): loss %.15g" % (name, world, transformers.__version__, first["ref_loss"]))
