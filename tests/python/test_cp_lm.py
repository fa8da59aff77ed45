"""frameshard.hf.context_parallel: CP for the language model of a transformers Qwen-VL model.

Multi-process (Gloo, world 2 and 3; one launch of tests/python/cp_lm_worker.py per world serves
every scenario): for Qwen2-VL, Qwen2.5-VL, Qwen3-VL (DeepStack) and Qwen3.5 (linear-attention
layers too), float64, the vision frames sharded by hf.enable at the same time, one training step:
the loss summed over the ranks, each rank's logits at its positions and every parameter gradient
(SUM-all-reduced) against the single-process unsharded model. World 3 with load_balanced is 6
chunks; the prompt (125 tokens) is a multiple of neither 4 nor 6, so the end padding is covered;
the tail scenario puts every visual token in the first chunks (ranks without visual rows, hence
without DeepStack rows); contiguous splits with and without vision sharding; HF gradient
checkpointing (non-reentrant: the recomputation reruns the CP attention, its layout riding in the
layers' kwargs, and Qwen3.5's gathered linear attention); a text-only batch (61 tokens; no
position ids from transformers). Also: only the text model's
attention modules run the "frameshard_cp" implementation, the vision config keeps its own,
`remove` restores the model, the positions match the C++ core's visual_token_owners, a padding
attention mask and ranks with different batches raise on every rank.

Tolerance: harness.RTOL_HF (1e-5) relative to max(1, scale). The two runs differ by the order of
the float64 sums (the attention over gathered keys, the gradient all-reduce), but transformers
computes some steps in float32 even in a float64 model -- the RMSNorms (they upcast to float32
and cast back), the rotary tables, Qwen3.5's gated delta rule -- so a float64 rounding
difference can flip a float32 rounding: measured up to 1.5e-9 absolute on gradients of scale
0.8, 2e-16 on losses and logits.
"""

import os
import sys

import pytest

import frameshard
from frameshard import hf
from frameshard.hf import _cp as hf_cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
from cp_lm_worker import FAMILIES, SCENARIOS  # noqa: E402
from harness import RTOL_HF, run_world, scenario  # noqa: E402

WORLDS = (2, 3)
PARITY = [name for name in SCENARIOS if name.startswith(("parity_", "tail_", "contiguous_", "checkpointing_", "text_"))]


@pytest.fixture(scope="module", params=WORLDS)
def world_results(request):
    return request.param, run_world("cp_lm_worker.py", request.param)


def within(diff, scale):
    return diff <= RTOL_HF * max(1.0, scale)


@pytest.mark.parametrize("name", PARITY)
def test_parity(world_results, name):
    world, per_rank = scenario(world_results, name)
    first = per_rank[0]
    assert abs(first["loss"] - first["ref_loss"]) <= RTOL_HF * max(1.0, abs(first["ref_loss"])), first
    assert abs(sum(r["local_loss"] for r in per_rank) - first["ref_loss"]) <= 1e-12 + RTOL_HF * abs(first["ref_loss"])
    for rank, res in enumerate(per_rank):
        assert within(res["logits_diff"], res["logits_scale"]), (name, world, rank, res["logits_diff"])
        assert within(res["grad_diff"], res["grad_scale"]), (name, world, rank, res["grad_diff"])
        # vision and text parameters (text only: the vision tower has no gradient)
        assert res["grads_compared"] > (10 if name.startswith("text_") else 40), res["grads_compared"]
        # Only the text model's attention ran the CP implementation, once per full layer (and once
        # more in the backward's recomputation under checkpointing).
        calls = 2 if name.startswith("checkpointing_") else 1
        assert len(res["attention_calls"]) == calls * res["full_attention_layers"] >= 1, res["attention_calls"]
        assert all(c.endswith("Attention") and "Vision" not in c for c in res["attention_calls"])
        assert res["vision_attention"] == "eager" and res["restored"] and res["owners_match"]
        print(
            "cp %-20s world %d rank %d: loss %.15g (unsharded %.15g), logits diff %.2g, grads diff %.2g "
            "(scale %.2g), %d rows (%d padding), %d visual"
            % (
                name,
                world,
                rank,
                res["local_loss"],
                res["ref_loss"],
                res["logits_diff"],
                res["grad_diff"],
                res["grad_scale"],
                res["local_rows"],
                res["padding_rows"],
                res["local_visual"],
            )
        )
    seq, split = first["seq_len"], "contiguous" if name.startswith("contiguous") else "load_balanced"
    padded = hf_cp.padded_length(seq, world, split)
    assert sum(r["local_rows"] for r in per_rank) == padded
    assert sum(r["padding_rows"] for r in per_rank) == padded - seq
    if name.startswith(("parity_", "text_")):
        assert padded > seq  # 125 tokens: end padding at world 2 (4 chunks) and 3 (6 chunks)
    if name.startswith("tail_"):
        visual = [r["local_visual"] for r in per_rank]
        assert min(visual) == 0 < max(visual), visual  # a rank without visual (DeepStack) rows


def test_refused_padding(world_results):
    world, per_rank = scenario(world_results, "refused_padding")
    for res in per_rank:
        assert "expected attention_mask None or all ones" in res["error_text"], res


def test_disagreeing_ranks(world_results):
    world, per_rank = scenario(world_results, "disagreeing_ranks")
    texts = [res["error_text"] for res in per_rank]
    assert "expected every rank to pass the same whole batch" in texts[0] and len(set(texts)) == 1, texts


@pytest.mark.parametrize("split", hf_cp.SPLITS)
@pytest.mark.parametrize("cp", [1, 2, 3, 4])
def test_chunk_positions_partition(split, cp):
    for seq in (1, 7, 24, 125):
        total = hf_cp.padded_length(seq, cp, split)
        rows = [hf_cp.chunk_positions(seq, cp, r, split).tolist() for r in range(cp)]
        assert sorted(sum(rows, [])) == list(range(total))
        assert len({len(r) for r in rows}) == 1
        if split == "load_balanced" and cp > 1:
            size = total // (2 * cp)
            assert rows[0][-1] == total - 1 and rows[0][size - 1] == size - 1  # chunks 0 and 2CP-1


def test_errors():
    model, visual, _ = hf_models.build("qwen2_vl")
    with pytest.raises(frameshard.FrameshardError, match="expected split 'load_balanced' or 'contiguous', got 'ring'"):
        hf.context_parallel(model, None, split="ring")
    with pytest.raises(
        frameshard.FrameshardError,
        match="context_parallel: expected a transformers model of a family with context parallelism",
    ):
        hf.context_parallel(visual, None)
    assert hf.remove_context_parallel(model) is False
    assert set(FAMILIES) <= {f.name for f in hf.families() if f.text}
