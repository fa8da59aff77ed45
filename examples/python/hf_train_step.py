#!/usr/bin/env python3
"""One training step of a Hugging Face Qwen2-VL model with frameshard's vision frame sharding.

    .venv/bin/python -m pip install --no-build-isolation .        # once, from the repo root
    .venv/bin/torchrun --standalone --nproc-per-node 2 examples/python/hf_train_step.py

Builds a tiny random Qwen2-VL (no download), a batch of three images, and runs one step on every
rank of a 2-process Gloo group. `frameshard.hf.enable` is the only frameshard line the training
loop needs: each rank then encodes only its share of the frames and the embeddings are gathered
back (differentiably) before they enter the language model. As in context parallelism, each rank
takes the loss on its own part of the sequence and the gradients are summed over the group.
The script also runs the same step without sharding and exits non-zero if the gradients differ.

Then a few steps of a real context-parallel training loop (`cp_training_loop`): the language model
under `frameshard.hf.context_parallel` (each rank runs its load-balanced chunks of the sequence,
attention over all-gathered K/V), the vision tower frame-sharded by `hf.enable`, AdamW; checked
against the same loop on one unsharded model, every step's loss.
"""

import copy

import torch
import torch.distributed as dist
import transformers

import frameshard


def tiny_qwen2_vl() -> transformers.Qwen2VLForConditionalGeneration:
    config = transformers.Qwen2VLConfig(
        text_config=dict(
            vocab_size=128,
            hidden_size=48,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            bos_token_id=0,
            eos_token_id=1,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 4, 4]},
        ),
        vision_config=dict(
            depth=2,
            embed_dim=32,
            hidden_size=48,
            num_heads=2,
            mlp_ratio=2,
            in_channels=3,
            patch_size=4,
            temporal_patch_size=2,
            spatial_merge_size=2,
        ),
        vision_start_token_id=2,
        vision_end_token_id=5,
        image_token_id=3,
        video_token_id=4,
    )
    torch.manual_seed(0)  # the same weights on every rank
    return transformers.Qwen2VLForConditionalGeneration._from_config(config, attn_implementation="eager")


def batch(grid_thw: list[list[int]]) -> dict[str, torch.Tensor]:
    """pixel_values as the Qwen processor packs them, and a prompt with each image's tokens."""
    gen = torch.Generator().manual_seed(1)  # the same batch on every rank
    grid = torch.tensor(grid_thw)
    pixel_values = torch.randn(int(grid.prod(-1).sum()), 3 * 2 * 4 * 4, generator=gen)
    ids = []
    for t, h, w in grid_thw:
        ids += [10, 2] + [3] * (t * h * w // 4) + [5]
    input_ids = torch.tensor([ids + [11, 12, 1]])
    return dict(
        input_ids=input_ids,
        mm_token_type_ids=(input_ids == 3).long(),
        pixel_values=pixel_values,
        image_grid_thw=grid,
    )


def train_step(model, inputs, rank, world):
    """Forward, this rank's share of the loss (as CP splits the sequence), backward, and the
    SUM all-reduce of every gradient over the group. Returns the local loss."""
    model.zero_grad()
    logits = model(**inputs).logits[0, :-1]
    labels = inputs["input_ids"][0, 1:]
    mine = torch.arange(labels.numel()) % world == rank
    loss = torch.nn.functional.cross_entropy(logits[mine], labels[mine], reduction="sum")
    loss.backward()
    loss = float(loss.detach())
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
    return loss


def cp_training_loop(rank, world, steps=3):
    """`steps` AdamW steps with CP on the language model and frame-sharded vision, next to the
    same steps on an unsharded copy; returns the largest loss difference."""
    model = tiny_qwen2_vl()
    reference = copy.deepcopy(model)
    inputs = batch([[1, 8, 8], [1, 4, 8], [2, 4, 4]])
    labels = inputs["input_ids"].masked_fill(inputs["input_ids"] == 3, -100)  # no loss on image tokens
    config = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0)
    frameshard.hf.enable(model, dist.group.WORLD, config)
    cp = frameshard.hf.context_parallel(model, dist.group.WORLD)  # split="load_balanced"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-3)
    worst = 0.0
    for step in range(steps):
        optimizer.zero_grad()
        loss = cp(**inputs, labels=labels).loss  # this rank's share: the ranks' sum is the mean
        loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)  # SUM over the CP group
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        ref_optimizer.zero_grad()
        logits = reference(**inputs).logits[0, :-1]
        ref_loss = torch.nn.functional.cross_entropy(logits, labels[0, 1:], ignore_index=-100)
        ref_loss.backward()
        ref_optimizer.step()
        worst = max(worst, abs(float(total) - float(ref_loss.detach())))
        seq = inputs["input_ids"].shape[1]
        mine = cp.positions(seq).tolist()  # chunks rank and 2*world-1-rank (end padding >= seq)
        if rank == 0:
            print(
                "CP step %d: loss %.6f (unsharded %.6f); rank 0 runs positions %d-%d and %d-%d of %d"
                % (
                    step,
                    float(total),
                    float(ref_loss.detach()),
                    mine[0],
                    mine[len(mine) // 2 - 1],
                    mine[len(mine) // 2],
                    mine[-1],
                    seq,
                ),
                flush=True,
            )
    cp.remove()
    return worst


def main() -> None:
    dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR/PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    model = tiny_qwen2_vl()
    reference = copy.deepcopy(model)  # the same step without sharding, for the check below
    inputs = batch([[1, 8, 8], [1, 4, 8], [2, 4, 4]])

    # min_tokens/min_frames 0: shard even this tiny batch (the defaults, 2048 tokens or 32
    # frames, keep small batches on the replicated path).
    config = frameshard.FrameShardingConfig(enabled=True, min_tokens=0, min_frames=0)
    frameshard.hf.enable(model, dist.group.WORLD, config)

    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    loss = train_step(model, inputs, rank, world)
    ref_loss = train_step(reference, inputs, rank, world)
    pairs = [
        (p.grad, q.grad) for p, q in zip(model.parameters(), reference.parameters(), strict=True) if q.grad is not None
    ]
    diff = max(float((g - h).abs().max()) for g, h in pairs) / max(float(h.abs().max()) for _, h in pairs)
    optimizer.step()

    plan = frameshard.plan(inputs["image_grid_thw"], world, config)
    mine = plan.ranks[rank]
    print(
        "rank %d/%d: encoded %d of %d patch rows (tower grid %s), loss %.6f (unsharded %.6f), "
        "max grad diff vs unsharded %.1e (relative)"
        % (rank, world, mine.real_patch_rows, plan.total_patch_rows, mine.grid, loss, ref_loss, diff),
        flush=True,
    )
    frameshard.hf.disable(model)
    loss_diff = cp_training_loop(rank, world)
    # The clean exit of a torch.distributed job (a barrier, then destroy_process_group; pass
    # peers_alive=False after an error, where a peer may never reach the barrier).
    frameshard.shut_down()
    # Only the summation order differs: float32 rounding.
    if diff > 1e-4:
        raise SystemExit("rank %d: sharded gradients differ from the unsharded step by %.2e" % (rank, diff))
    if loss_diff > 1e-4:
        raise SystemExit("rank %d: the CP loop's losses differ from the unsharded loop's by %.2e" % (rank, loss_diff))


if __name__ == "__main__":
    main()
