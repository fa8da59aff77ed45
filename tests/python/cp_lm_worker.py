"""The rank side of tests/python/test_cp_lm.py: frameshard.hf.context_parallel on tiny random
transformers Qwen-VL models (hf_models.build), one process per rank (harness.run_world).

    python cp_lm_worker.py --rank R --world W --store FILE --out DIR [--scenarios a,b]

A parity scenario builds the model in float64 and runs one training step twice on every rank:
the unsharded reference (the whole model on the whole sequence, SDPA text attention: its softmax
is float64, where eager's is float32) and the CP model (vision frames sharded by hf.enable
unless the scenario says not, the language model under context_parallel). It reports the loss
summed over the ranks, this rank's logits against the reference's at its positions, and every
parameter gradient SUM-all-reduced over the group against the reference's.
"""

import copy
import os
import sys

import torch
import torch.distributed as dist

import frameshard
from frameshard import hf
from frameshard.hf import _cp as hf_cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_models  # noqa: E402
import worker_common  # noqa: E402

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5")
SHARD_ALL = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0)


def batch(family, tail=0, text_only=False):
    """(model, inputs, labels): float64 model; `tail` extra text tokens after the prompt (so
    the later chunks hold no visual token); labels -100 at the image tokens. `text_only`: 61
    text tokens and no media (transformers then builds no position ids: the CP forward does)."""
    model, _, inputs = hf_models.build(family)
    if text_only:
        ids = (torch.arange(61) % 50 + 20).view(1, -1)
        return model.double(), {"input_ids": ids}, ids
    model = model.double()
    inputs["pixel_values"] = inputs["pixel_values"].double()
    if tail:
        extra = (torch.arange(tail) % 50 + 20).view(1, -1)
        inputs["input_ids"] = torch.cat([inputs["input_ids"], extra], dim=1)
        inputs["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(extra)], dim=1)
    labels = inputs["input_ids"].masked_fill(inputs["input_ids"] == hf_models.TOKENS["image_token_id"], -100)
    return model, inputs, labels


def reference_step(model, inputs, labels):
    """(loss, logits) of the unsharded model, float64 cross entropy (transformers' own loss
    upcasts to float32 only), after its backward."""
    model.config.text_config._attn_implementation = "sdpa"
    logits = model(**inputs).logits
    loss = torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:], ignore_index=-100)
    loss.backward()
    return float(loss.detach()), logits.detach()


def parity(family, split="load_balanced", shard=True, tail=0, checkpointing=False, text_only=False):
    def run(rank, world, group):
        model, inputs, labels = batch(family, tail, text_only)
        reference = copy.deepcopy(model)
        ref_loss, ref_logits = reference_step(reference, inputs, labels)
        if checkpointing:  # the recomputation reruns the CP attention (its layout rides in kwargs)
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.train()
        if shard:
            hf.enable(model, group, SHARD_ALL, timeout=60)
        cp = hf.context_parallel(model, group, split, timeout=60)
        out = cp(**inputs, labels=labels)
        out.loss.backward()
        loss = out.loss.detach().clone()
        dist.all_reduce(loss, group=group)
        seq = inputs["input_ids"].shape[1]
        positions = cp.positions(seq)
        real = positions < seq
        logits_diff = worker_common.max_diff(out.logits[0, real], ref_logits[0, positions[real]])
        grads = worker_common.reduced_grads(model, group)
        ref_grads = {n: p.grad for n, p in reference.named_parameters() if p.grad is not None}
        grad_diff, grad_scale = worker_common.compare(grads, ref_grads)
        text = model.model.language_model
        types = getattr(text.config, "layer_types", None) or ["full_attention"] * text.config.num_hidden_layers
        full_layers = sum(1 for t in types if t == "full_attention")
        local_visual = int((cp.shard(inputs["input_ids"]) == hf_models.TOKENS["image_token_id"]).sum())
        result = dict(
            loss=float(loss),
            ref_loss=ref_loss,
            local_loss=float(out.loss),
            logits_diff=logits_diff,
            logits_scale=float(ref_logits.abs().max()),
            grad_diff=grad_diff,
            grad_scale=grad_scale,
            grads_compared=len(ref_grads),
            attention_calls=cp.attention_calls,
            full_attention_layers=full_layers,
            vision_attention=model.config.vision_config._attn_implementation,
            seq_len=seq,
            local_rows=int(positions.numel()),
            padding_rows=int((~real).sum()),
            local_visual=local_visual,
            owners_match=owners_match(cp, seq),
        )
        cp.remove()
        result["restored"] = text.config._attn_implementation == "eager" and "forward" not in vars(text)
        return result

    return run


def owners_match(cp, seq):
    """Whether this rank's positions are those the C++ core's visual_token_owners assigns to it
    (one owner computation for frameshard's gather: owner and C++ decoder)."""
    total = hf_cp.padded_length(seq, cp.cp_size, cp.split)
    owners = frameshard.visual_token_owners(list(range(total)), total, cp.cp_size, cp.split)
    mine = [p for p, o in enumerate(owners) if o == cp.rank]
    return mine == cp.positions(seq).tolist()


def refused_padding(rank, world, group):
    """A padding attention mask is refused before any collective, on every rank."""
    model, inputs, labels = batch("qwen2_vl", tail=4)
    cp = hf.context_parallel(model, group, timeout=30)
    mask = torch.ones_like(inputs["input_ids"])
    mask[0, -3:] = 0  # right padding inside the tail
    try:
        cp(**inputs, attention_mask=mask, labels=labels)
    except frameshard.FrameshardError as e:
        return {"error_text": str(e)}
    return {"error_text": ""}


def disagreeing_ranks(rank, world, group):
    """Rank 1 passes a shorter sequence: every rank raises the same error (the agreement check
    of the first collective), none hangs."""
    model, inputs, labels = batch("qwen2_vl", tail=4 if rank != 1 else 0)
    cp = hf.context_parallel(model, group, timeout=30)
    try:
        cp(**inputs, labels=labels)
    except frameshard.FrameshardError as e:
        return {"error_text": str(e)}
    return {"error_text": ""}


SCENARIOS = {"parity_%s" % f: parity(f) for f in FAMILIES}
SCENARIOS.update(
    {
        # visual tokens only in the first chunks: ranks without visual rows (DeepStack included)
        "tail_qwen3_vl": parity("qwen3_vl", tail=420),
        "contiguous_qwen2_vl": parity("qwen2_vl", split="contiguous", shard=False),
        "contiguous_qwen3_5": parity("qwen3_5", split="contiguous", tail=7),
        "checkpointing_qwen3_5": parity("qwen3_5", checkpointing=True),
        "checkpointing_qwen3_vl": parity("qwen3_vl", checkpointing=True),
        "text_only_qwen3_vl": parity("qwen3_vl", text_only=True),
        "refused_padding": refused_padding,
        "disagreeing_ranks": disagreeing_ranks,
    }
)

if __name__ == "__main__":
    worker_common.main(SCENARIOS)
