"""frameshard.hf.enable as trainers hold their models, and with the training features they use.

Single-process: the wrappers `enable` sees through (torch.compile, PEFT, checkpoint_wrapper,
`.model` / `.model.visual`, a subclass or an FSDP2-style derived class of a vision module), and
the FrameshardError for what it cannot use (naming what it found and what to pass).

Multi-process (Gloo, world 2 and 3, one launch of tests/python/train_worker.py per rank and world
by harness.py; the scenarios are described there): for every family of hf_models.FAMILIES,
HF gradient checkpointing (use_reentrant False and True), torch.utils.checkpoint around the
vision module (non-reentrant with and without early stop, reentrant), CPU bf16 autocast, bf16 and
fp16 parameters, a frozen tower, no_grad and inference_mode evaluation, and two vision calls
(images then videos) in one step; for a DeepStack family (qwen3_vl) and a windowed one
(qwen2_5_vl), FSDP2 fully_shard (after / before enable, on the blocks too), FSDP1, DDP (the
wrapper and its .module), torch.compile (eager and aot_eager backends, compiled and run before
enable, the whole model compiled), PEFT LoRA and checkpoint_wrapper. Each compares one training
step sharded against replicated: outputs and every parameter gradient summed over the group; and
checks that every vision call (recomputations included) saw only the rank's rows. The slowest
torch.compile variants run at one world only or only by hand (train_worker.AT_WORLDS; skipped
here otherwise): FRAMESHARD_TEST_SCENARIOS=all runs everything, FRAMESHARD_TEST_SCENARIOS=a,b
only those scenarios.

Tolerances (relative to max(1, the largest replicated value)):
  float64 steps: harness.RTOL_HF = 1e-5 -- the transformers towers compute rotary embeddings and
    the attention softmax in float32 even in a float64 model, so a float64 rounding difference
    from another summation order can flip a float32 rounding (measured up to 4e-7 relative).
  bfloat16 / float16 (autocast or parameters): no fixed bound; both runs are measured against a
    float64 run of the same rounded weights, inputs and loss weights, and sharding must not make
    the step less accurate than the replicated run in the same dtype: its error at most
    LOWP_ERR_FACTOR times the replicated run's (outputs and gradients), and sharded - replicated
    at most (1 + LOWP_ERR_FACTOR) times it (the triangle inequality). The replicated error is the
    dtype's own rounding (bf16: 8 significant bits, fp16: 11): measured 1-2% of the output scale
    and 2-5% of the gradient scale for bf16, 0.1% and 0.3-0.6% for fp16. Outputs came out bitwise
    equal (the CPU kernels compute each row alike whatever the row count); gradients differ
    because each rank sums its rows' contributions and the all-reduce adds the partial sums in
    the low dtype (sharded / replicated error ratio measured 0.5-1.0).

Run: `.venv/bin/python -m pytest tests/python/test_wrappers.py` after installing the package (or
with PYTHONPATH=build/python-dev, scripts/python-dev.sh), or through ctest
(tests/python/package_test.sh, label `python`).
"""

import os
import re
import sys

import pytest
import torch

import frameshard
from frameshard import hf
from frameshard._unwrap import unwrap_module
from frameshard.hf import _family

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
from harness import RTOL_HF, assert_no_less_accurate, assert_parity, run_selected, scenario_or_skip  # noqa: E402
from train_worker import FEATURES, WRAPPER_FAMILIES, WRAPPERS  # noqa: E402

LOW_PRECISION = {"autocast_bf16": "torch.bfloat16", "bf16": "torch.bfloat16", "fp16": "torch.float16"}
EVALUATION = ("no_grad", "inference_mode")


# ------------------------------------------------------------- single process


def _whole(family="qwen3_vl"):
    model, visual, _ = hf_models.build(family)
    return model, visual


def test_find_vision_module_sees_through_wrappers():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    model, visual = _whole()
    compiled_visual = torch.compile(visual, backend="eager")  # construction compiles nothing
    forms = {
        "model": model,
        "model.model": model.model,
        "model.model.visual": visual,
        "torch.compile(model)": torch.compile(model, backend="eager"),
        "torch.compile(visual)": compiled_visual,
        "checkpoint_wrapper(visual)": checkpoint_wrapper(visual),
        "compile(checkpoint_wrapper(visual))": torch.compile(checkpoint_wrapper(visual), backend="eager"),
    }
    for name, held in forms.items():
        assert hf.find_vision_module(held) is visual, name
    model.model.visual = compiled_visual  # assigned back, as trainers do
    assert hf.find_vision_module(model) is visual


def test_find_vision_module_through_peft():
    import peft

    model, visual = _whole("qwen2_5_vl")
    config = peft.LoraConfig(r=2, target_modules=r".*blocks\.\d+\.attn\.qkv|.*self_attn\.q_proj")
    held = peft.get_peft_model(model, config)
    assert hf.find_vision_module(held) is visual
    assert hf.find_vision_module(held.base_model) is visual  # the LoraModel tuner
    assert unwrap_module(held) is model


def test_a_new_wrapper_is_one_entry_of_the_table(monkeypatch, solo_group):
    """A wrapper frameshard does not know (DeepSpeed's engine, say) is one entry of
    _unwrap.WRAPPERS: enable finds the vision module through it, and context_parallel's
    grad_reduction="auto" reads the reduction it declares."""
    from frameshard import _unwrap
    from frameshard.hf import _grad_reduction

    class Engine(torch.nn.Module):  # holds the model as `.engine_module`, as no known wrapper does
        def __init__(self, module):
            super().__init__()
            self.engine_module = module

    model, visual = _whole()
    held = Engine(model)
    seen = "wrappers seen through: torch.compile, checkpoint_wrapper, DDP, FSDP1, FSDP2, PEFT), got Engine"
    with pytest.raises(frameshard.FrameshardError, match=re.escape(seen)):
        hf.find_vision_module(held)
    assert _grad_reduction.detect(held) is None
    reduction = _unwrap.Reduction(frozenset([0]), 4.0, "Engine over rank 0")
    entry = _unwrap.Wrapper(
        "Engine",
        inner=lambda m: m.engine_module if isinstance(m, Engine) else None,
        reduction=lambda m, fn: reduction if isinstance(m, Engine) else None,
    )
    monkeypatch.setattr(_unwrap, "WRAPPERS", (*_unwrap.WRAPPERS, entry))
    assert _unwrap.wrapper_names().endswith("PEFT, Engine")  # errors name it too
    assert hf.find_vision_module(held) is visual
    assert unwrap_module(held) is model
    assert _unwrap.describe(held) == "Engine wrapping %s" % type(model).__name__
    assert _grad_reduction.detect(held) is reduction
    assert _grad_reduction.loss_scale(held, solo_group, "auto") == 4.0  # divisor * cp / |ranks|


def test_family_from_class_hierarchy():
    model, visual = _whole()
    cls = type(visual)
    # A user subclass counts, and so does what FSDP2's fully_shard makes of the instance (a
    # derived class named FSDP<Class>).
    for name in ("MyTower", "FSDP" + cls.__name__):
        visual.__class__ = type(name, (cls,), {})
        assert _family.of_vision(visual).name == "qwen3_vl", name
        assert hf.find_vision_module(model) is visual, name
    # A look-alike class name outside transformers does not.
    assert _family.of_vision(type(cls.__name__, (torch.nn.Module,), {})()) is None


def test_enable_disable_is_enabled_through_every_form(solo_group):
    model, visual = _whole()
    group = solo_group  # enable only stores it; the forward would use it
    assert hf.enable(torch.compile(model, backend="eager"), group) is visual
    assert hf.is_enabled(model) and hf.is_enabled(model.model) and hf.is_enabled(visual)
    assert "forward" in vars(visual) and _family.of_vision(visual).name == "qwen3_vl"
    assert hf.disable(model.model) and not hf.is_enabled(model)
    assert not hf.disable(visual)  # already disabled
    assert "forward" not in vars(visual)


@pytest.mark.parametrize(
    "what,make,found",
    [
        ("a Linear", lambda: torch.nn.Linear(2, 2), "got Linear (no .visual or .model.visual)"),
        (
            "an unknown wrapper",
            lambda: type("Holder", (torch.nn.Module,), {})(),
            "got Holder (no .visual or .model.visual)",
        ),
        (
            "torch.compile of a Linear",
            lambda: torch.compile(torch.nn.Linear(2, 2), backend="eager"),
            "got OptimizedModule wrapping Linear (no .visual or .model.visual)",
        ),
        (
            "a model whose .visual is not supported",
            lambda: _with_attr(torch.nn.Module(), "visual", torch.nn.Linear(2, 2)),
            "got Module with vision module Linear",
        ),
        (
            "a vision module wrapped in an unknown wrapper",
            lambda: _with_attr(torch.nn.Module(), "model", _with_attr(torch.nn.Module(), "visual", _Holder())),
            "got Module with vision module _Holder",
        ),
    ],
)
def test_unsupported_raises_naming_what_was_found_and_what_to_pass(what, make, found, solo_group):
    calls = {"enable": lambda m: hf.enable(m, group=solo_group), "disable": hf.disable, "is_enabled": hf.is_enabled}
    for fn, call in calls.items():
        with pytest.raises(frameshard.FrameshardError) as err:
            call(make())
        text = str(err.value)
        assert text.startswith("frameshard.hf.%s: expected" % fn), text
        assert found in text, (what, text)
        assert "expected a transformers model of a supported family" in text and "Qwen3VLVisionModel" in text, text
        assert "pass the model or its vision module" in text, text


class _Holder(torch.nn.Module):
    """A wrapper frameshard does not know, holding a supported vision module."""

    def __init__(self):
        super().__init__()
        self.inner = _whole()[1]


def _with_attr(module, name, value):
    setattr(module, name, value)
    return module


# ------------------------------------------------------------- multi process


@pytest.fixture(scope="module", params=[2, 3], ids=lambda w: "world%d" % w)
def world_results(request):
    # FRAMESHARD_TEST_SCENARIOS=a,b (or "all") runs only those (all: the by-hand ones too).
    results = run_selected("train_worker.py", request.param)
    cpu = {n: max(r[n]["cpu_seconds"] for r in results) for n in results[0]}
    print(
        "\ntrain_worker world %d: %d scenarios, %.0f s of CPU in the slowest rank's scenarios; slowest: %s"
        % (
            request.param,
            len(cpu),
            sum(cpu.values()),
            ", ".join("%s %.1f s" % kv for kv in sorted(cpu.items(), key=lambda kv: -kv[1])[:5]),
        )
    )
    return request.param, results


def _scenario(world_results, name):
    return scenario_or_skip(world_results, name, "train_worker.AT_WORLDS and UNEVEN_WORLD_FAMILIES")


def _common_checks(name, world, per_rank, vision_calls):
    """The sharded path ran: every vision call of the step saw only this rank's share of the
    rows (`vision_calls` calls, recomputations included), and disable restores the forward."""
    for rank, res in enumerate(per_rank):
        assert res["enabled"], (name, rank)
        assert res["plan_local_patch_rows"] < res["total_patch_rows"], (name, rank)
        assert res["seen_rows"] == [res["plan_local_patch_rows"]] * vision_calls, (name, world, rank, res["seen_rows"])


def _is_vision_only(family):
    return family in hf_models.VISION_ONLY


@pytest.mark.parametrize("family", hf_models.FAMILIES)
@pytest.mark.parametrize("feature", FEATURES)
def test_feature_parity(world_results, feature, family):
    name = "%s:%s" % (feature, family)
    world, per_rank = _scenario(world_results, name)
    whole = not _is_vision_only(family)
    logits = 1 if whole and feature != "two_calls" else 0
    # Vision calls per step: the features call, the model forward, checkpoint recomputations.
    calls = {"ckpt": 2, "ckpt_reentrant": 2, "two_calls": 2}.get(feature, 1) + logits
    _common_checks(name, world, per_rank, calls)
    if feature in LOW_PRECISION:
        for rank, res in enumerate(per_rank):
            assert res["path"] == "sharded"
            assert res["dtypes"] == [LOW_PRECISION[feature]], (name, res["dtypes"])
            assert_no_less_accurate(name, world, rank, res)
        return
    assert_parity(world, name, per_rank, RTOL_HF)
    for res in per_rank:
        assert res["dtypes"] == ["torch.float64"], (name, res["dtypes"])
        if feature in EVALUATION:
            assert res["requires_grad"] == [] and res["params"] == 0, (name, res)
        elif feature == "frozen":
            # No autograd through the gather (so no backward collective: the ranks ran backward
            # one at a time), and the language model still trains.
            assert res["vision_grad_fn"] is None and res["ref"]["vision_grad_fn"] is None, (name, res)
            assert res["requires_grad"] == (["logits"] if whole else []), (name, res["requires_grad"])
            if whole:
                assert res["params_with_grad"] > 0 and res["grad_scale"] > 0
        else:
            assert res["params_with_grad"] > 0 and res["vision_grad_fn"] is not None, (name, res)
        if feature in ("hf_ckpt", "hf_ckpt_reentrant"):
            assert res["checkpointing"], name
        if feature == "ckpt_reentrant":
            assert res["vision_grad_fn"] == "CheckpointFunctionBackward", res["vision_grad_fn"]
        if feature == "two_calls":
            assert {"vision_0", "video_0"} <= set(res["outputs"]), res["outputs"]
    if family == "qwen3_vl":
        assert "vision_2" in per_rank[0]["outputs"]  # DeepStack features compared too


@pytest.mark.parametrize("family", WRAPPER_FAMILIES)
@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_wrapper_parity(world_results, wrapper, family):
    name = "%s:%s" % (wrapper, family)
    world, per_rank = _scenario(world_results, name)
    calls = {"ckpt_wrapper": 4, "ckpt_full_recompute": 3}.get(wrapper, 2)  # features + model forward
    _common_checks(name, world, per_rank, calls)
    assert_parity(world, name, per_rank, RTOL_HF)
    for res in per_rank:
        assert res["disabled"], (name, res)
        assert res["params_with_grad"] > 0
        if wrapper.startswith("fsdp2"):
            assert res["visual_class"].startswith("FSDP"), res["visual_class"]
            if wrapper == "fsdp2_blocks":
                assert res["block_class"].startswith("FSDP"), res["block_class"]
        if wrapper == "fsdp1":
            assert res["visual_class"] == "FullyShardedDataParallel"
        if wrapper.startswith("compile"):
            assert res["held_class" if wrapper == "compile_model" else "visual_class"] == "OptimizedModule", res
            # The vision module's own code was compiled (recursive=False on the sharded forward
            # only skips its frame): graphs were captured.
            assert res["graphs"] > 0, res
        if wrapper == "peft":
            assert res["held_class"] == "PeftModel" and res["lora_vision"] > 0 and res["lora_lm"] > 0, res
            assert res["params_with_grad"] == res["trainable"]
        if wrapper == "ckpt_wrapper":
            assert res["visual_class"] == "CheckpointWrapper"
