"""frameshard.integrations.trl.enable(trainer, config, cp_size=2): TRL's SFTTrainer and a plain
transformers Trainer fine-tuning a tiny random Qwen2-VL with context parallelism, against the
same training without it (trl pinned in .venv; Gloo processes, DDP or FSDP2 through accelerate).

tests/python/trl_sft_worker.py runs at worlds 1, 2 and 4 (harness.run_world): dp 1 x cp 2 (world
2) against dp 1 (world 1), dp 2 x cp 2 (world 4) against dp 2 (world 2). Each run: 3 optimizer
steps of 2 accumulated micro-batches of 2 right-padded rows, plain SGD (a gradient of the wrong
scale moves the parameters), then evaluate() on 5 rows (a last batch of 1).

Run: `.venv/bin/python -m pytest tests/python/test_trl_sft.py` with the package installed with its
`trl` extra (or PYTHONPATH=build/python-dev), or through ctest (label `python`).
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run_world, scenario  # noqa: E402

pytest.importorskip("trl")

LOSS = 1e-5  # per-step losses, absolute
PARAMS = 1e-4  # final parameters, relative to the largest
# kind -> the reference's kind ("accelerate": accelerate's ParallelismConfig(cp_size=2) declared
# and taken over, against the run without CP; "accepts": the Trainer's gathered token count).
KINDS = {k: k for k in ("sft", "trainer", "peft", "resume", "fsdp2", "accepts")}
KINDS["accelerate"] = "accepts"


@pytest.fixture(scope="module")
def worlds():
    return {w: run_world("trl_sft_worker.py", w) for w in (1, 2, 4)}


def _pair(worlds, kind, dp):
    """(the run without CP on dp processes, rank 0's; the dp x cp 2 run, every rank's)."""
    _, ref = scenario((dp, worlds[dp]), "%s_cp1" % KINDS[kind])
    _, cp = scenario((2 * dp, worlds[2 * dp]), "%s_cp2" % kind)
    return ref[0], cp


def _max_rel(a, b):
    diff = max(max(abs(x - y) for x, y in zip(a[n], b[n], strict=True)) for n in a)
    scale = max(max(abs(x) for x in a[n]) for n in a)
    return diff / max(scale, 1e-30)


@pytest.mark.parametrize("dp", (1, 2))
@pytest.mark.parametrize("kind", KINDS)
def test_cp_trains_as_the_run_without_cp(worlds, kind, dp):
    ref, cp = _pair(worlds, kind, dp)
    params = _max_rel(ref["params"], cp[0]["params"])
    print(
        "%-7s dp %d x cp 2: losses %s against %s, params rel diff %.3g, eval_loss %.7g against %.7g"
        % (kind, dp, cp[0]["losses"], ref["losses"], params, cp[0]["eval"]["eval_loss"], ref["eval"]["eval_loss"])
    )
    assert len(ref["losses"]) == 3 and ref["params"]
    for rank, r in enumerate(cp):
        assert len(r["losses"]) == 3, (rank, r["losses"])
        assert max(abs(a - b) for a, b in zip(r["losses"], ref["losses"], strict=True)) <= LOSS, (rank, r["losses"])
        assert abs(r["eval"]["eval_loss"] - ref["eval"]["eval_loss"]) <= LOSS, (rank, r["eval"])
        assert r["enabled"] and not ref["enabled"]
    assert params <= PARAMS, params
    if kind == "resume":  # the checkpoint of step 2: the run without CP's, whole
        assert ref["checkpoint"].keys() == cp[0]["checkpoint"].keys()
        assert _max_rel(ref["checkpoint"], cp[0]["checkpoint"]) <= PARAMS
    if kind != "trainer":  # TRL's metrics: the tokens of each CP group counted once
        for key in ("num_tokens", "entropy", "mean_token_accuracy"):
            assert abs(cp[0]["logged"][key] - ref["logged"][key]) <= 1e-5 * max(1.0, abs(ref["logged"][key])), key
        assert ref["checkpointing"] and cp[0]["checkpointing"] == ref["checkpointing"]  # SFTConfig's default
    else:  # predict(): the logits of every eval row once
        assert cp[0]["predict_shape"] == ref["predict_shape"]
        assert abs(cp[0]["predict_sum"] - ref["predict_sum"]) <= 1e-5 * ref["predict_sum"]


@pytest.mark.parametrize("dp", (1, 2))
def test_each_rank_runs_its_share_of_the_sequence_and_of_the_frames(worlds, dp):
    ref, cp = _pair(worlds, "sft", dp)
    assert ref["decoder"] == [] and ref["tower_local"] == ref["tower_total"]  # the reference: whole
    for rank, r in enumerate(cp):
        decoder = max(local / whole for local, whole in r["decoder"])
        tower = sum(r["tower_local"]) / sum(r["tower_total"])
        print(
            "dp %d x cp 2 rank %d: decoder rows <= %.3f of the sequence, tower rows %.3f" % (dp, rank, decoder, tower)
        )
        assert r["decoder"] and decoder <= 0.6, (rank, r["decoder"])
        assert tower <= 0.7, (rank, r["tower_local"], r["tower_total"])


def test_accelerates_cp_leaves_pixels_whole_and_cuts_mrope_positions_on_the_batch_dimension():
    """What the Trainer's own CP (accelerate's ParallelismConfig(cp_size)) would shard of a VLM's
    batch, read from the Trainer's `_prepare_context_parallel_inputs` (docs/python-trl-sft.md)."""
    import types

    import torch
    import transformers

    config = types.SimpleNamespace(cp_enabled=True, cp_backend="torch")
    trainer = types.SimpleNamespace(
        accelerator=types.SimpleNamespace(parallelism_config=config, maybe_context_parallel=print)
    )
    model = types.SimpleNamespace(config=types.SimpleNamespace(_attn_implementation="sdpa"))
    b, s = 2, 12
    inputs = {
        "input_ids": torch.ones(b, s, dtype=torch.long),
        "labels": torch.ones(b, s, dtype=torch.long),
        "attention_mask": torch.ones(b, s, dtype=torch.long),
        "position_ids": torch.zeros(3, b, s, dtype=torch.long),  # Qwen's mRoPE positions
        "pixel_values": torch.zeros(64, 12),
        "image_grid_thw": torch.tensor([[1, 8, 8]]),
    }
    context, inputs = transformers.Trainer._prepare_context_parallel_inputs(trainer, model, inputs)
    cut = {id(t): d for t, d in zip(context.keywords["buffers"], context.keywords["buffer_seq_dims"], strict=True)}
    assert id(inputs["pixel_values"]) not in cut and id(inputs["image_grid_thw"]) not in cut  # every rank: every frame
    assert cut[id(inputs["position_ids"])] == 1  # dim 1 of (3, B, S): the batch, not the sequence
    assert cut[id(inputs["input_ids"])] == 1


def test_what_the_cp_forward_cannot_run_is_refused_naming_the_option():
    import torch

    import frameshard
    from frameshard.integrations import _cp_trainer
    from frameshard.integrations import trl as fs_trl

    fn = "frameshard.integrations.trl.enable"
    ids = torch.ones(2, 4, dtype=torch.long)
    right = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    with pytest.raises(frameshard.FrameshardError, match="padding_free=False"):
        _cp_trainer._check_batch({"input_ids": ids, "cu_seq_lens_q": torch.tensor([0, 4])}, fn)
    with pytest.raises(frameshard.FrameshardError, match="padding_free=False"):
        _cp_trainer._check_batch({"input_ids": ids, "position_ids": torch.arange(4).expand(2, 4)}, fn)
    labels = ids.masked_fill(right == 0, -100)
    _cp_trainer._check_batch({"input_ids": ids, "attention_mask": right, "labels": labels}, fn)  # accepted
    with pytest.raises(frameshard.FrameshardError, match=r"labels: expected -100 at every padded position, got 1"):
        _cp_trainer._check_batch({"input_ids": ids, "attention_mask": right, "labels": ids}, fn)
    hook = _cp_trainer._drop_right_padding(fn)
    assert hook(None, (), {"attention_mask": right})[1]["attention_mask"] is None  # pads last: dropped
    with pytest.raises(frameshard.FrameshardError, match="expected right padding"):
        hook(None, (), {"attention_mask": torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])})
    with pytest.raises(frameshard.FrameshardError, match=r"cp_size: expected an int >= 1, got 0"):
        fs_trl.enable(object(), cp_size=0)
    with pytest.raises(frameshard.FrameshardError, match="expected a trl.GRPOTrainer or a transformers Trainer"):
        fs_trl.enable(object(), cp_size=2)
