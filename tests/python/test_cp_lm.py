"""frameshard.hf.context_parallel: CP for the language model of a transformers Qwen-VL model.

Multi-process (Gloo, world 2 and 3; one launch of tests/python/cp_lm_worker.py per world serves
every scenario): for Qwen2-VL, Qwen2.5-VL, Qwen3-VL (DeepStack), Qwen3.5 (linear-attention
layers too) and GLM-4.1V (49 tokens; its five-frame video alone, each frame one tower row and
marked with the image token), float64, the vision frames sharded by hf.enable at the same time, one training step:
the loss summed over the ranks, each rank's logits at its positions and every parameter gradient
(SUM-all-reduced) against the single-process unsharded model. World 3 with load_balanced is 6
chunks; the prompt (125 tokens) is a multiple of neither 4 nor 6, so the end padding is covered;
the tail scenario puts every visual token in the first chunks (ranks without visual rows, hence
without DeepStack rows); contiguous splits with and without vision sharding; HF gradient
checkpointing (non-reentrant: the recomputation reruns the CP attention, its layout riding in the
layers' kwargs, and Qwen3.5's divided linear attention: its halo and state exchanges); a
text-only batch (61 tokens; no position ids from transformers). Qwen3.5's linear attention is
divided (hf/_cp_linear.py): each layer's recurrence ran on this rank's rows only, and the decays
are slowed (cp_lm_worker.slow_decays) so that a wrong state entering a chunk fails the check
(a halved state: 1e-2 on logits and gradients; zeroed conv halos: 9e-3). With gather "owner"
(owner_*: the merge after the split, hf/_cp_owner.py; each rank embeds only its rows and receives
only their visual rows): the five families with whole frames and with a frame cut across the
ranks (split_frames), images with a video (Qwen3-VL's DeepStack rows joined over both), a rank
without visual rows, the contiguous split and a text-only batch, the same parity plus the rows
each rank received and embedded; what the owner path refuses (refused_owner); and over a dp x cp
mesh (mesh_owner_*: dp = world and cp 1 here, dp 2 x cp 2 when the worker runs at world 4; whole
and split frames, a replica without media joining through hf.join_without_media). Also: only the
text model's
attention modules run the "frameshard_cp" implementation, the vision config keeps its own,
`remove` restores the model, the positions match the C++ core's visual_token_owners, a padding
attention mask and ranks with different batches raise on every rank.

Tolerance: harness.RTOL_HF (1e-5) relative to max(1, scale). The two runs differ by the order of
the float64 sums (the attention over gathered keys, the gradient all-reduce), but transformers
computes some steps in float32 even in a float64 model -- the RMSNorms (they upcast to float32
and cast back), the rotary tables, Qwen3.5's gated delta rule -- so a float64 rounding
difference can flip a float32 rounding: measured up to 1.5e-9 absolute on gradients of scale
0.8, 2e-16 on losses and logits. Qwen3.5's divided linear attention runs transformers' float32
rule on other chunk boundaries and composes the chunks' float32 state maps: measured up to 1.8e-8
on gradients, 8.6e-8 on logits, 1.4e-9 on losses (world 3).
"""

import os
import sys

import pytest

import frameshard
from frameshard import hf
from frameshard.hf import _cp_layout as hf_layout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
from cp_lm_worker import FAMILIES, SCENARIOS  # noqa: E402
from harness import RTOL_HF, run_world, scenario  # noqa: E402

WORLDS = (2, 3)
PARITY = [
    name
    for name in SCENARIOS
    if name.startswith(("parity_", "tail_", "contiguous_", "checkpointing_", "text_", "owner_", "video_"))
]


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
        assert res["grads_compared"] > (10 if "text_only" in name else 40), res["grads_compared"]
        # Only the text model's attention ran the CP implementation, once per full layer (and once
        # more in the backward's recomputation under checkpointing).
        calls = 2 if name.startswith("checkpointing_") else 1
        assert len(res["attention_calls"]) == calls * res["full_attention_layers"] >= 1, res["attention_calls"]
        assert all(c.endswith("Attention") and "Vision" not in c for c in res["attention_calls"])
        # Qwen3.5's linear attention is divided: each layer's recurrence ran on this rank's rows
        # only (the gathered path would run on the whole padded sequence).
        assert res["linear_rows"] == [res["local_rows"]] * (calls * res["linear_layers"]), res["linear_rows"]
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
    seq, split = first["seq_len"], "contiguous" if "contiguous_" in name else "load_balanced"
    padded = hf_layout.padded_length(seq, world, split)
    assert sum(r["local_rows"] for r in per_rank) == padded
    assert sum(r["padding_rows"] for r in per_rank) == padded - seq
    if name.startswith(("parity_", "text_")):
        assert padded > seq  # 125 tokens: end padding at world 2 (4 chunks) and 3 (6 chunks)
    if "tail_" in name:
        visual = [r["local_visual"] for r in per_rank]
        assert min(visual) == 0 < max(visual), visual  # a rank without visual (DeepStack) rows
    if name.startswith("owner_"):
        # The merge after the split: each rank embedded only its rows and received exactly the
        # visual rows its positions hold (owner routing), together every visual row once.
        for rank, res in enumerate(per_rank):
            assert res["owner_visual_rows"] == res["local_visual"], (name, world, rank, res["owner_visual_rows"])
            assert res["owner_embeds_rows"] == res["local_rows"], (name, world, rank, res["owner_embeds_rows"])
        assert sum(r["owner_visual_rows"] for r in per_rank) == first["visual_tokens"]
        assert first["split"] == ("_split_" in name), first["split"]  # split_frames cut the 16 x 16 frame


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n.startswith("whole_")])
def test_whole_outputs_give_every_rank_the_unsharded_logits_loss_and_gradients(world_results, name):
    world, per_rank = scenario(world_results, name)
    for rank, res in enumerate(per_rank):
        assert abs(res["loss"] - res["ref_loss"]) <= RTOL_HF * max(1.0, abs(res["ref_loss"])), (name, rank, res)
        assert within(res["logits_diff"], res["logits_scale"]), (name, world, rank, res["logits_diff"])
        assert within(res["grad_diff"], res["grad_scale"]), (name, world, rank, res["grad_diff"])
        assert res["grads_compared"] > 40 and res["local_rows"] < res["logits_shape"][1], res
        if "_owner_" in name:  # the decoder still ran on this rank's rows only
            assert res["owner_embeds_rows"] == res["local_rows"], res
        print(
            "cp %-26s world %d rank %d: loss %.15g (unsharded %.15g), logits %s diff %.2g, grads diff %.2g"
            % (
                name,
                world,
                rank,
                res["loss"],
                res["ref_loss"],
                res["logits_shape"],
                res["logits_diff"],
                res["grad_diff"],
            )
        )


def test_refused_padding(world_results):
    world, per_rank = scenario(world_results, "refused_padding")
    for res in per_rank:
        assert "expected attention_mask None or all ones" in res["error_text"], res


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n.startswith("mesh_owner_")])
def test_mesh_owner(world_results, name):
    """gather owner over a dp x cp mesh (dp = world, cp 1 here; dp 2 x cp 2 at world 4 by hand):
    each replica's loss, logits and the mesh-reduced gradients against the unsharded replicas."""
    world, per_rank = scenario(world_results, name)
    for rank, res in enumerate(per_rank):
        assert abs(res["loss"] - res["ref_loss"]) <= RTOL_HF * max(1.0, abs(res["ref_loss"])), (name, rank, res)
        assert within(res["logits_diff"], res["logits_scale"]), (name, world, rank, res["logits_diff"])
        assert within(res["grad_diff"], res["grad_scale"]), (name, world, rank, res["grad_diff"])
        assert res["owner_visual_rows"] == res["local_visual"], (name, world, rank, res["owner_visual_rows"])
        print(
            "cp %-28s world %d (dp %d x cp %d) rank %d: loss diff %.2g, logits diff %.2g, grads diff %.2g, %d visual"
            % (
                name,
                world,
                res["dp"],
                res["cp"],
                rank,
                res["loss"] - res["ref_loss"],
                res["logits_diff"],
                res["grad_diff"],
                res["owner_visual_rows"],
            )
        )
    assert len({r["ref_loss"] for r in per_rank}) == per_rank[0]["dp"]  # every replica its own batch


def test_refused_owner(world_results):
    world, per_rank = scenario(world_results, "refused_owner")
    field = "distributed.multimodal.vision.frame_sharding."
    for res in per_rank:
        e = res["errors"]
        assert field + "gather: expected 'all' for a vision call outside" in e["without_cp"], e
        assert "expected input_ids and no inputs_embeds with %sgather 'owner'" % field in e["inputs_embeds"], e
        assert "expected hf.enable's group and context_parallel's group to hold the same ranks" in e["groups"], e
        assert field + "mesh_dims [dp, cp]: expected context_parallel's group to hold this replica's" in e["mesh"], e


def test_disagreeing_ranks(world_results):
    world, per_rank = scenario(world_results, "disagreeing_ranks")
    texts = [res["error_text"] for res in per_rank]
    assert "expected every rank to pass the same whole batch" in texts[0] and len(set(texts)) == 1, texts


@pytest.mark.parametrize("split", hf_layout.SPLITS)
@pytest.mark.parametrize("cp", [1, 2, 3, 4])
def test_chunk_positions_partition(split, cp):
    for seq in (1, 7, 24, 125):
        total = hf_layout.padded_length(seq, cp, split)
        rows = [hf_layout.chunk_positions(seq, cp, r, split).tolist() for r in range(cp)]
        assert sorted(sum(rows, [])) == list(range(total))
        assert len({len(r) for r in rows}) == 1
        if split == "load_balanced" and cp > 1:
            size = total // (2 * cp)
            assert rows[0][-1] == total - 1 and rows[0][size - 1] == size - 1  # chunks 0 and 2CP-1


@pytest.mark.parametrize("split", hf_layout.SPLITS)
@pytest.mark.parametrize("cp", (2, 3))
def test_the_mask_free_cpu_attention_equals_the_masked_one_with_its_gradients(split, cp):
    """hf/_cp_attention.py: each run of a rank's rows against the keys before it and its own
    block, merged by log-sum-exp, against SDPA over every gathered key with the causal mask."""
    import torch

    from frameshard.hf import _cp_attention

    torch.manual_seed(cp)
    seq = 29  # end padding at every cp and split
    padded = hf_layout.padded_length(seq, cp, split)
    order = torch.cat([hf_layout.chunk_positions(seq, cp, r, split) for r in range(cp)])
    for rank in range(cp):
        positions = hf_layout.chunk_positions(seq, cp, rank, split)
        fwd = hf_layout.Forward(None, None, cp, seq, positions, order, torch.argsort(order), [])
        q = torch.randn(2, 4, len(positions), 8, dtype=torch.float64, requires_grad=True)  # 4 heads
        k = torch.randn(2, 2, padded, 8, dtype=torch.float64, requires_grad=True)  # 2 key heads
        v = torch.randn(2, 2, padded, 8, dtype=torch.float64, requires_grad=True)
        out = _cp_attention.flash_runs(q, torch.cat([k, v], dim=1), fwd, None, 0.0)
        wide_k, wide_v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        ref = torch.nn.functional.scaled_dot_product_attention(q, wide_k, wide_v, attn_mask=fwd.mask)
        weight = torch.randn_like(ref)
        grads = torch.autograd.grad((out * weight).sum(), (q, k, v))
        ref_grads = torch.autograd.grad((ref * weight).sum(), (q, k, v))
        assert float((out - ref).detach().abs().max()) <= 1e-12
        assert max(float((a - b).abs().max()) for a, b in zip(grads, ref_grads, strict=True)) <= 1e-12
    assert _cp_attention.runs(torch.tensor([0, 1, 2, 6, 7])) == [(0, 0, 3), (3, 6, 2)]


def test_errors():
    model, visual, _ = hf_models.build("qwen2_vl")
    with pytest.raises(frameshard.FrameshardError, match="expected split 'load_balanced' or 'contiguous', got 'ring'"):
        hf.context_parallel(model, None, split="ring")
    with pytest.raises(frameshard.FrameshardError, match="grad_reduction: expected one of auto, sum, mean, got 'avg'"):
        hf.context_parallel(model, None, grad_reduction="avg")
    with pytest.raises(
        frameshard.FrameshardError,
        match="context_parallel: expected a transformers model of a family with context parallelism",
    ):
        hf.context_parallel(visual, None)
    assert hf.remove_context_parallel(model) is False
    assert set(FAMILIES) <= {f.name for f in hf.families() if f.text}
