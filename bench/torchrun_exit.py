#!/usr/bin/env python3
"""Issue 38's exit race, as small as it runs: FSDP2 + frameshard on a tiny Qwen2.5-VL, 2 steps.

    .venv/bin/torchrun --standalone --nproc-per-node 2 bench/torchrun_exit.py [--no-clean-exit]

The training of examples/python/fsdp2_device_mesh.py (its tiny random model, its batches, its
`shut_down`) without the unsharded reference, on Gloo (CPU), cp = world. With --no-clean-exit it
returns from main with the process group alive, as many user scripts end; otherwise it ends with
`frameshard.shut_down()` (barrier, destroy_process_group). bench/exit_loop.sh runs it N times
and counts the abnormal exits (docs/reliability.md, "Process exit under torchrun").
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import frameshard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "python"))
from fsdp2_device_mesh import replica_batch, shard, tiny_model  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--no-clean-exit", dest="clean_exit", action="store_false")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (1, dist.get_world_size()), mesh_dim_names=("dp", "cp"))
    model = tiny_model("qwen2_5_vl")
    cp_model = shard(model, mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        batch = replica_batch(0, step)
        loss = cp_model(**batch, labels=batch["input_ids"]).loss
        loss.backward()  # the gradients' scale does not matter here
        optimizer.step()
        optimizer.zero_grad()
        total = loss.detach().clone()
        dist.all_reduce(total)  # as a script logs its loss: the last Gloo work before the exit
        if dist.get_rank() == 0:
            print("step %d: loss %.6f" % (step, float(total)), flush=True)
    print("rank %d: done (%s exit)" % (dist.get_rank(), "clean" if args.clean_exit else "no clean"), flush=True)
    if args.clean_exit:
        frameshard.shut_down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
