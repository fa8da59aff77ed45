#!/usr/bin/env python3
"""Training a Qwen2.5-VL or Qwen3-VL with FSDP2 over a 2-D DeviceMesh, frameshard on both axes.

    .venv/bin/torchrun --standalone --nproc-per-node 4 examples/python/fsdp2_device_mesh.py --family qwen3_vl --dp 2
    .venv/bin/torchrun --standalone --nproc-per-node 2 examples/python/fsdp2_device_mesh.py --family qwen2_5_vl

The mesh is (dp, cp) with dims named "dp" and "cp", as torchtitan and NeMo Automodel name them:
- `frameshard.hf.enable(model, mesh, FrameShardingConfig(mesh_dims=["dp", "cp"]))`: every DP
  replica's images are encoded once, balanced over all dp x cp ranks;
- `frameshard.hf.context_parallel(model, mesh)`: the language model runs each rank's chunks of the
  sequence over the mesh's "cp" dimension; its loss is this rank's share of its replica's mean,
  times `cp.grad_scale`;
- FSDP2 (`fully_shard`, HSDP on the 2-D mesh: sharded over cp, replicated over dp) reduces the
  gradients over the whole mesh and divides by dp * cp. The CP ranks' losses are shares that sum
  to their replica's loss, so the right divisor is dp: context_parallel reads FSDP2's reduction
  at each loss and scales the share by cp (`cp.grad_scale`), so a plain `loss.backward()` gives
  the unsharded model's gradients.

A tiny random model (no download) on CPU with Gloo (NCCL and bf16 on GPUs: --device cuda). The
script checks itself: the same steps on one unsharded model per rank (each replica's batch, DP
average) must give the same gradients and losses; it exits non-zero otherwise.

It ends as a training script should (`frameshard.shut_down()`): a barrier and `destroy_process_group()` before
the interpreter exits, so no Gloo work is left to interpreter teardown (issue 38: otherwise a rank
can abort at exit). `--no-clean-exit` returns from main with the group alive, to compare.
"""

import argparse
import copy
import os

import torch
import torch.distributed as dist
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import frameshard

TOKENS = dict(vision_start_token_id=2, vision_end_token_id=5, image_token_id=3, video_token_id=4)


def tiny_model(family: str) -> torch.nn.Module:
    """A random Qwen2.5-VL or Qwen3-VL of a few thousand parameters (the same on every rank)."""
    text = dict(vocab_size=128, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, head_dim=24, bos_token_id=0, eos_token_id=1,
                rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [4, 4, 4]})  # fmt: skip
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=48,
                  in_channels=3, patch_size=4, temporal_patch_size=2, spatial_merge_size=2)  # fmt: skip
    if family == "qwen2_5_vl":
        vision.update(window_size=16, fullatt_block_indexes=[1])
        config = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision, **TOKENS)
        cls = transformers.Qwen2_5_VLForConditionalGeneration
    else:
        vision.update(num_position_embeddings=64, deepstack_visual_indexes=[0])
        config = transformers.Qwen3VLConfig(text_config=text, vision_config=vision, **TOKENS)
        cls = transformers.Qwen3VLForConditionalGeneration
    torch.manual_seed(0)
    return cls._from_config(config, attn_implementation="sdpa")


def replica_batch(replica: int, step: int) -> dict:
    """One DP replica's batch (the same on its CP ranks): a few images and their prompt."""
    gen = torch.Generator().manual_seed(100 * step + replica)
    grid = [[1, 8, 8], [1, 4, 8], [2, 4, 4]][: 2 + (replica + step) % 2]
    pixels = torch.randn(sum(t * h * w for t, h, w in grid), 3 * 2 * 4 * 4, generator=gen)
    ids = []
    for t, h, w in grid:
        ids += [10, 2] + [3] * (t * h * w // 4) + [5]
    ids += torch.randint(6, 128, (20,), generator=gen).tolist() + [1]
    input_ids = torch.tensor([ids])
    return dict(input_ids=input_ids, mm_token_type_ids=(input_ids == 3).long(), pixel_values=pixels,
                image_grid_thw=torch.tensor(grid))  # fmt: skip


def reference(model: torch.nn.Module, dp: int, steps: int, lr: float) -> tuple[list, list]:
    """The same training on one unsharded model: every replica's mean loss, gradients averaged
    over the replicas (what DP means). Returns (losses per step, gradients of the first step)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses, first = [], None
    for step in range(steps):
        total = 0.0
        for replica in range(dp):
            batch = replica_batch(replica, step)
            loss = model(**batch, labels=batch["input_ids"]).loss / dp
            loss.backward()
            total += loss.item()
        if first is None:
            first = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        optimizer.step()
        optimizer.zero_grad()
        losses.append(total)
    return losses, first


def shard(model, mesh):
    """frameshard first (it patches instances), then FSDP2 over the same mesh, its blocks first;
    returns the context_parallel handle."""
    config = frameshard.FrameShardingConfig(enabled=True, mesh_dims=["dp", "cp"], min_tokens=0, min_frames=0)
    frameshard.hf.enable(model, mesh, config)
    cp_model = frameshard.hf.context_parallel(model, mesh)
    for block in [*model.model.visual.blocks, *model.model.language_model.layers]:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return cp_model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="qwen3_vl", choices=["qwen2_5_vl", "qwen3_vl"])
    parser.add_argument("--dp", type=int, default=1, help="data-parallel replicas; cp = world / dp")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-clean-exit", dest="clean_exit", action="store_false",
                        help="return from main with the process group alive, as many training scripts "
                        "end (to reproduce issue 38's abort at exit; see docs/reliability.md)")  # fmt: skip
    args = parser.parse_args()
    try:
        code = train(args)
    except BaseException:
        if args.clean_exit:
            frameshard.shut_down(peers_alive=False)
        raise
    if args.clean_exit:
        frameshard.shut_down()
    return code


def train(args: argparse.Namespace) -> int:
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    dp, cp = args.dp, world // args.dp
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    mesh = init_device_mesh(args.device, (dp, cp), mesh_dim_names=("dp", "cp"))
    replica = mesh.get_coordinate()[0]
    lr = 1e-3

    model = tiny_model(args.family)
    ref_losses, ref_grads = reference(copy.deepcopy(model), dp, args.steps, lr)

    cp_model = shard(model, mesh)
    model.to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

    worst = 0.0
    for step in range(args.steps):
        batch = {k: v.to(args.device) for k, v in replica_batch(replica, step).items()}
        loss = cp_model(**batch, labels=batch["input_ids"]).loss  # this rank's share x grad_scale
        loss.backward()  # FSDP2 divides by dp * cp; grad_scale (cp here) makes it dp
        if step == 0:
            for name, p in model.named_parameters():
                if name in ref_grads:
                    diff = (p.grad.full_tensor().cpu() - ref_grads[name]).abs().max()
                    worst = max(worst, float(diff / ref_grads[name].abs().max().clamp(min=1e-6)))
        optimizer.step()
        optimizer.zero_grad()
        total = loss.detach() / cp_model.grad_scale  # this rank's share
        dist.all_reduce(total)  # the shares of every rank: dp replicas' losses
        mean = float(total) / dp
        if rank == 0:
            print("step %d: loss %.6f (unsharded %.6f)" % (step, mean, ref_losses[step]))
        if abs(mean - ref_losses[step]) > 1e-4 * max(1.0, abs(ref_losses[step])):
            raise SystemExit("rank %d step %d: loss %.8f, unsharded %.8f" % (rank, step, mean, ref_losses[step]))
    if worst > 1e-3:
        raise SystemExit("rank %d: first step's gradients differ from the unsharded model's by %.3g" % (rank, worst))
    if rank == 0:
        print("%s, dp %d x cp %d: losses and gradients (max rel. diff %.2g) equal the unsharded model's"
              % (args.family, dp, cp, worst))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
