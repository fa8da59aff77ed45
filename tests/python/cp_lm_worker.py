"""The rank side of tests/python/test_cp_lm.py: frameshard.hf.context_parallel on tiny random
transformers Qwen-VL models (hf_models.build), one process per rank (harness.run_world).

    python cp_lm_worker.py --rank R --world W --store FILE --out DIR [--scenarios a,b]

A parity scenario builds the model in float64 and runs one training step twice on every rank:
the unsharded reference (the whole model on the whole sequence, SDPA text attention: its softmax
is float64, where eager's is float32) and the CP model (vision frames sharded by hf.enable
unless the scenario says not, the language model under context_parallel). It reports the loss
summed over the ranks, this rank's logits against the reference's at its positions, and every
parameter gradient SUM-all-reduced over the group against the reference's. The owner_*
scenarios enable the tower with gather "owner" (hf/_cp_owner.py: the merge after the split) and
also report the visual rows and inputs_embeds rows the owner path gave this rank.
"""

import copy
import os
import sys

import torch
import torch.distributed as dist

import frameshard
from frameshard import hf
from frameshard.hf import _cp_layout as hf_layout
from frameshard.hf import _cp_linear as hf_linear
from frameshard.hf import _cp_owner as hf_owner
from frameshard.hf import _family as hf_family

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_models as fm  # noqa: E402
import hf_models  # noqa: E402
import worker_common  # noqa: E402

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "glm4v")
SHARD_ALL = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0)


def owner_config(split_frames=False):
    """gather owner (the merge after the split); with split_frames, no exchange cost or floor so
    that the tiny towers' 16 x 16 frame is cut (as split_worker.config)."""
    extra = dict(split_frames=True, split_exchange_cost=0, split_exchange_latency_us=0.0, min_local_patch_rows=0)
    return frameshard.FrameShardingConfig(
        enabled=True, min_tokens=0, min_frames=0, gather="owner", **(extra if split_frames else {})
    )


def batch(family, tail=0, text_only=False, video=False):
    """(model, inputs, labels): float64 model; `tail` extra text tokens after the prompt (so
    the later chunks hold no visual token); labels -100 at the image tokens. `text_only`: 61
    text tokens and no media (transformers then builds no position ids: the CP forward does).
    `video`: the second grid row (1 x 6 x 8) is passed as a video (12 video tokens)."""
    if family == "glm4v":
        return glm4v_batch(tail, text_only, video)
    model, _, inputs = hf_models.build(family)
    slow_decays(model)
    if text_only:
        ids = (torch.arange(61) % 50 + 20).view(1, -1)
        return model.double(), {"input_ids": ids}, ids
    model = model.double()
    inputs["pixel_values"] = inputs["pixel_values"].double()
    if tail:
        extra = (torch.arange(tail) % 50 + 20).view(1, -1)
        inputs["input_ids"] = torch.cat([inputs["input_ids"], extra], dim=1)
        inputs["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(extra)], dim=1)
    if video:  # grid row 1 (1 x 6 x 8: one frame, as Qwen3-VL's processor gives each frame its own run)
        grid = inputs.pop("image_grid_thw")
        rows = grid.prod(-1).tolist()
        tokens = [r // 4 for r in rows]
        begin = rows[0]
        pv = inputs.pop("pixel_values")
        inputs["pixel_values_videos"] = pv[begin : begin + rows[1]]
        inputs["pixel_values"] = torch.cat([pv[:begin], pv[begin + rows[1] :]])
        inputs["image_grid_thw"] = grid[[0, 2, 3, 4]]
        inputs["video_grid_thw"] = grid[1:2]
        start = tokens[0] + 3 + 2  # text, <vision_start>, tokens, <vision_end> per image
        inputs["input_ids"][0, start : start + tokens[1]] = hf_models.TOKENS["video_token_id"]
        inputs["mm_token_type_ids"][0, start : start + tokens[1]] = 2
    visual = visual_mask(inputs["input_ids"])
    labels = inputs["input_ids"].masked_fill(visual, -100)
    return model, inputs, labels


def glm4v_batch(tail=0, text_only=False, video=False):
    """batch() for GLM-4V (family_models.glm4v_model, float64; its image and video token ids are
    hf_models'): five images (49 tokens), or with `video` one video of five frames alone (each
    frame's tokens after a text token, as GLM's processor puts a timestamp; GLM marks video frames
    with the image token, so transformers' GLM-4V takes images or videos in one batch, not both)."""
    model, _ = fm.glm4v_model()
    if text_only:
        ids = (torch.arange(61) % 50 + 10).view(1, -1)
        return model, {"input_ids": ids}, ids
    if video:  # five frames: cut across the ranks with split_frames at world 2 and 3
        grid = torch.tensor([[5, 4, 4]])
        ids = [fm.TEXT, fm.GLM_TOKENS["video_start_token_id"]]
        for frame in range(5):
            ids += [fm.TEXT + 1 + frame] + [fm.GLM_TOKENS["image_token_id"]] * 4
        ids = torch.tensor([ids + [fm.GLM_TOKENS["video_end_token_id"], fm.TEXT]])
        mm = (ids == fm.GLM_TOKENS["image_token_id"]).to(torch.int64) * 2
        inputs = dict(pixel_values_videos=fm.pixels(grid, fm.GLM_FEATURES), video_grid_thw=grid)
    else:
        grid = torch.tensor(fm.GLM_GRID)
        ids, mm = fm.glm4v_prompt(grid)
        inputs = dict(pixel_values=fm.pixels(grid, fm.GLM_FEATURES), image_grid_thw=grid)
    if tail:
        extra = (torch.arange(tail) % 50 + 10).view(1, -1)
        ids, mm = torch.cat([ids, extra], dim=1), torch.cat([mm, torch.zeros_like(extra)], dim=1)
    inputs.update(input_ids=ids, mm_token_type_ids=mm)
    return model, inputs, ids.masked_fill(visual_mask(ids), -100)


def slow_decays(model):
    """Qwen3.5's linear attention: decays per token between 0.81 and 0.99 (A 0.02-0.3, dt_bias
    0), so that the recurrence's state carries across the CP chunk boundaries: with the tiny
    model's initialisation (A up to 16) it is forgotten within a token and a wrong state passes
    the parity check."""
    with torch.no_grad():
        for layer in model.modules():
            if hasattr(layer, "A_log") and hasattr(layer, "dt_bias"):
                layer.A_log.copy_(torch.linspace(0.02, 0.3, layer.A_log.numel()).log())
                layer.dt_bias.zero_()


def visual_mask(ids):
    return (ids == hf_models.TOKENS["image_token_id"]) | (ids == hf_models.TOKENS["video_token_id"])


def reference_step(model, inputs, labels):
    """(loss, logits) of the unsharded model, float64 cross entropy (transformers' own loss
    upcasts to float32 only), after its backward."""
    model.config.text_config._attn_implementation = "sdpa"
    logits = model(**inputs).logits
    loss = torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:], ignore_index=-100)
    loss.backward()
    return float(loss.detach()), logits.detach()


def parity(
    family,
    split="load_balanced",
    shard=True,
    tail=0,
    checkpointing=False,
    text_only=False,
    config=SHARD_ALL,
    video=False,
):
    def run(rank, world, group):
        model, inputs, labels = batch(family, tail, text_only, video)
        reference = copy.deepcopy(model)
        ref_loss, ref_logits = reference_step(reference, inputs, labels)
        if checkpointing:  # the recomputation reruns the CP attention (its layout rides in kwargs)
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.train()
        if shard:
            hf.enable(model, group, config, timeout=60)
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
        linear_layers = sum(1 for t in types if t == "linear_attention")
        local_visual = int(visual_mask(cp.shard(inputs["input_ids"])).sum())
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
            linear_layers=linear_layers,
            linear_rows=hf_linear.processed(cp._state.last),  # rows each linear layer's recurrence ran on
            vision_attention=model.config.vision_config._attn_implementation,
            seq_len=seq,
            local_rows=int(positions.numel()),
            padding_rows=int((~real).sum()),
            local_visual=local_visual,
            owners_match=owners_match(cp, seq),
        )
        if config.gather == "owner":  # what the owner path received (embeddings and DeepStack rows)
            stats, dims = hf_owner.last_stats(model), frameshard.tower_dims(model.model.visual)
            result.update(
                owner_visual_rows=stats.visual_rows if stats else -1,
                owner_embeds_rows=stats.embeds_rows if stats else -1,
                visual_tokens=int(visual_mask(inputs["input_ids"]).sum()),
                split=any(
                    frameshard.plan(tower_grid(model, inputs[key]).tolist(), world, config, tower=dims).split
                    for key in ("image_grid_thw", "video_grid_thw")
                    if key in inputs
                ),
            )
        cp.remove()
        result["restored"] = text.config._attn_implementation == "eager" and not {"forward"} & (
            vars(text).keys() | vars(model.model).keys()
        )
        return result

    return run


def whole_outputs(family, grad_reduction, config=SHARD_ALL):
    """outputs="whole": every rank's logits and loss are the unsharded model's, and the gradients
    reduced as `grad_reduction` says ("sum": SUM over the group; "mean": the average) are too."""

    def run(rank, world, group):
        model, inputs, labels = batch(family)
        reference = copy.deepcopy(model)
        ref_loss, ref_logits = reference_step(reference, inputs, labels)
        hf.enable(model, group, config, timeout=60)
        cp = hf.context_parallel(model, group, outputs="whole", grad_reduction=grad_reduction, timeout=60)
        out = cp(**inputs, labels=labels)
        out.loss.backward()
        loss = float(out.loss) * (world if grad_reduction == "sum" else 1)  # "sum": the loss carries 1/cp
        grads = worker_common.reduced_grads(model, group)
        if grad_reduction == "mean":
            grads = {n: g / world for n, g in grads.items()}
        ref_grads = {n: p.grad for n, p in reference.named_parameters() if p.grad is not None}
        grad_diff, grad_scale = worker_common.compare(grads, ref_grads)
        stats = hf_owner.last_stats(model) if config.gather == "owner" else None
        cp.remove()
        return dict(
            loss=loss,
            ref_loss=ref_loss,
            logits_shape=list(out.logits.shape),
            logits_diff=worker_common.max_diff(out.logits, ref_logits),
            logits_scale=float(ref_logits.abs().max()),
            grad_diff=grad_diff,
            grad_scale=grad_scale,
            grads_compared=len(ref_grads),
            local_rows=int(cp.positions(inputs["input_ids"].shape[1]).numel()),
            owner_embeds_rows=stats.embeds_rows if stats else -1,
        )

    return run


def tower_grid(model, grid):
    """The grid rows the vision module takes (GLM-4V: one (1, h, w) row per frame)."""
    return hf_family.tower_grid(hf_family.of_vision(model.model.visual), grid)


def owners_match(cp, seq):
    """Whether this rank's positions are those the C++ core's visual_token_owners assigns to it
    (one owner computation for frameshard's gather: owner and C++ decoder)."""
    total = hf_layout.padded_length(seq, cp.cp_size, cp.split)
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


def on_mesh_config(split_frames=False):
    return frameshard.FrameShardingConfig(**{**vars(owner_config(split_frames)), "mesh_dims": ["dp", "cp"]})


def mesh_owner(family, split_frames=False, text_replica=False):
    """gather owner over a dp x cp mesh (cp 2 at world 4, else cp 1 and dp = world): every replica
    its own batch (lengths differ), the frames of all replicas balanced over the mesh, each
    visual row routed to the CP rank of its replica that holds its token. Against each replica's
    unsharded model: the loss summed over its CP ranks, this rank's logits, and the gradients
    SUM-all-reduced over the mesh / dp against the replicas' mean."""

    def run(rank, world, group):
        cp_size = 2 if world == 4 else 1
        dp = world // cp_size
        replicas = [dist.new_group(list(range(q * cp_size, (q + 1) * cp_size))) for q in range(dp)]
        cp_group = replicas[rank // cp_size]
        text_only = text_replica and rank // cp_size == 1  # replica 1 has no media this step
        model, inputs, labels = batch(family, tail=5 * (rank // cp_size), text_only=text_only)
        reference = copy.deepcopy(model)
        ref_loss, ref_logits = reference_step(reference, inputs, labels)
        mesh = frameshard.Mesh(group, dp=dp, cp=cp_size)
        hf.enable(model, config=on_mesh_config(split_frames), mesh=mesh, timeout=60)
        cp = hf.context_parallel(model, cp_group, timeout=60)
        out = cp(**inputs, labels=labels)
        # A replica without media joins the other replicas' vision collectives (forward, backward).
        joined = hf.join_without_media(model) if text_only else 0.0
        (out.loss + joined).backward()
        loss = out.loss.detach().clone()
        dist.all_reduce(loss, group=cp_group)
        seq = inputs["input_ids"].shape[1]
        positions = cp.positions(seq)
        real = positions < seq
        grads = {n: g / dp for n, g in worker_common.reduced_grads(model, group).items()}
        ref_grads = {n: g / world for n, g in worker_common.reduced_grads(reference, group).items()}
        grad_diff, grad_scale = worker_common.compare(grads, ref_grads)
        stats = hf_owner.last_stats(model)
        local = visual_mask(cp.shard(inputs["input_ids"]))
        result = dict(
            dp=dp,
            cp=cp_size,
            loss=float(loss),
            ref_loss=ref_loss,
            logits_diff=worker_common.max_diff(out.logits[0, real], ref_logits[0, positions[real]]),
            logits_scale=float(ref_logits.abs().max()),
            grad_diff=grad_diff,
            grad_scale=grad_scale,
            seq_len=seq,
            owner_visual_rows=stats.visual_rows if stats else -1,
            local_visual=int(local.sum()),
        )
        cp.remove()
        hf.disable(model)
        return result

    return run


def refused_owner(rank, world, group):
    """gather owner: what the owner path cannot do raises on every rank before any collective."""
    singles = [dist.new_group([r]) for r in range(world)]  # every rank creates every group
    errors = {}

    def attempt(key, fn):
        try:
            fn()
            errors[key] = ""
        except frameshard.FrameshardError as e:
            errors[key] = str(e)

    model, inputs, labels = batch("qwen2_vl")
    hf.enable(model, group, owner_config(), timeout=30)
    attempt("without_cp", lambda: model(**inputs))  # no context_parallel: nothing routes the rows
    cp = hf.context_parallel(model, group, timeout=30)
    embeds = model.model.get_input_embeddings()(inputs["input_ids"])
    rest = {k: v for k, v in inputs.items() if k != "input_ids"}
    attempt("inputs_embeds", lambda: cp(inputs_embeds=embeds, **rest, labels=labels))
    hf.context_parallel(model, singles[rank], timeout=30)  # a CP group other than hf.enable's
    attempt("groups", lambda: cp(**inputs, labels=labels))
    hf.context_parallel(model, group, timeout=30)  # the whole group, where the mesh's replicas have cp 1
    hf.enable(model, config=on_mesh_config(), mesh=frameshard.Mesh(group, dp=world, cp=1))
    attempt("mesh", lambda: cp(**inputs, labels=labels))
    cp.remove()
    hf.disable(model)
    return {"errors": errors}


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
        "text_only_qwen3_5": parity("qwen3_5", text_only=True),
        # gather owner: each rank embeds its chunks' tokens and receives only their visual rows
        **{"owner_%s" % f: parity(f, config=owner_config()) for f in FAMILIES},
        **{"owner_split_%s" % f: parity(f, config=owner_config(split_frames=True)) for f in FAMILIES},
        "owner_tail_qwen3_vl": parity("qwen3_vl", tail=420, config=owner_config()),
        "owner_contiguous_qwen3_5": parity("qwen3_5", split="contiguous", tail=7, config=owner_config()),
        "owner_text_only_qwen2_5_vl": parity("qwen2_5_vl", text_only=True, config=owner_config()),
        # images and a video: two routed vision calls, DeepStack rows joined as transformers joins them
        "owner_video_qwen3_vl": parity("qwen3_vl", video=True, config=owner_config()),
        "owner_split_video_qwen2_5_vl": parity("qwen2_5_vl", video=True, config=owner_config(split_frames=True)),
        "video_qwen3_vl": parity("qwen3_vl", video=True),
        # GLM-4V: a video's frames are one (1, h, w) tower row each and carry the image token
        "owner_video_glm4v": parity("glm4v", video=True, config=owner_config()),
        "owner_split_video_glm4v": parity("glm4v", video=True, config=owner_config(split_frames=True)),
        "refused_padding": refused_padding,
        "refused_owner": refused_owner,
        # gather owner over a dp x cp mesh (cp 1 at world 2 and 3; dp 2 x cp 2 when run at world 4)
        "mesh_owner_qwen3_vl": mesh_owner("qwen3_vl"),
        "mesh_owner_split_qwen2_5_vl": mesh_owner("qwen2_5_vl", split_frames=True),
        "mesh_owner_text_replica_qwen3_vl": mesh_owner("qwen3_vl", text_replica=True),
        "disagreeing_ranks": disagreeing_ranks,
        # outputs="whole" (the trainers' path): the whole logits and loss on every rank
        "whole_sum_qwen2_5_vl": whole_outputs("qwen2_5_vl", "sum"),
        "whole_mean_owner_qwen3_vl": whole_outputs("qwen3_vl", "mean", owner_config()),
    }
)

if __name__ == "__main__":
    worker_common.main(SCENARIOS)
