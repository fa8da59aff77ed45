"""The rank side of the multi-process package tests, shared by package_worker.py and
train_worker.py: the rank-specific loss weights, gradient reduction, comparisons, and `main`,
which joins the Gloo group, runs the scenarios and writes the results for harness.run_world.

    python <worker>.py --rank R --world W --store FILE --out DIR [--scenarios a,b]

Parity scenarios compare a sharded run against a replicated run on the same rank: outputs, and
every parameter gradient after a SUM all-reduce over the group, with a rank-specific loss
(loss_r = sum(w_r * outputs), w_r drawn from a per-rank seed), which is what a DP x CP training
step does.
"""

import argparse
import contextlib
import datetime
import json
import os
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist

import frameshard
from frameshard import _shutdown


def rank_weights(like, rank, salt):
    """Loss weights of rank `rank`: a fixed random tensor shaped and typed like `like`. The values
    are bfloat16 numbers, so a float64 run and a bfloat16 / float16 run of the same step weigh
    their outputs exactly alike."""
    gen = torch.Generator().manual_seed(1000 * salt + rank)
    return torch.randn(like.shape, generator=gen, dtype=torch.float64).to(torch.bfloat16).to(like.dtype)


def reduced_grads(module, group, float64_cpu=False):
    """{name: gradient SUM-all-reduced over the group} of every parameter of `module` (zeros for
    a parameter without a gradient); with float64_cpu, reduced as float64 CPU tensors (no bf16
    rounding in the sum, and no device tensors through the group)."""
    grads = {}
    for name, p in module.named_parameters():
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        g = g.double().cpu() if float64_cpu else g.clone()
        dist.all_reduce(g, group=group)
        grads[name] = g
    return grads


def max_diff(a, b):
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def compare(sharded, replicated):
    """(max abs diff over the tensors, max abs value of the replicated ones); the keys of
    `replicated` must all be in `sharded`."""
    diff, scale = 0.0, 0.0
    missing = sorted(set(replicated) - set(sharded))
    if missing:
        raise KeyError("compare: the sharded run lacks %s" % ", ".join(missing[:5]))
    for key in replicated:
        assert sharded[key].shape == replicated[key].shape, (key, sharded[key].shape, replicated[key].shape)
        diff = max(diff, max_diff(sharded[key], replicated[key]))
        scale = max(scale, float(replicated[key].double().abs().max()) if replicated[key].numel() else 0.0)
    return diff, scale


def raised(call, errors=frameshard.FrameshardError):
    """{"raised": the error's type name or None, "message": its text or ""} of `call()`: what a
    scenario that must fail alike on every rank reports. `errors`: the exception types caught
    (default frameshard.FrameshardError: anything else fails the scenario)."""
    try:
        call()
    except errors as e:
        return {"raised": type(e).__name__, "message": str(e)}
    return {"raised": None, "message": ""}


def diffs(out, ref_out, grads, ref_grads):
    """The outputs' and the gradients' largest differences from the replicated run and its scales
    (what harness.assert_parity reads)."""
    out_diff, out_scale = compare(out, ref_out)
    grad_diff, grad_scale = compare(grads, ref_grads) if ref_grads else (0.0, 0.0)
    return {"out_diff": out_diff, "out_scale": out_scale, "grad_diff": grad_diff, "grad_scale": grad_scale}


def parity_record(out, ref_out, grads, ref_grads):
    """diffs, the output names and the parameter counts of a sharded step against the replicated one."""
    return {
        "outputs": sorted(out),
        **diffs(out, ref_out, grads, ref_grads),
        "params": len(grads),
        "params_with_grad": sum(1 for g in ref_grads.values() if float(g.abs().max()) > 0),
    }


@contextlib.contextmanager
def shared_tmp(group, timeout=120.0):
    """Rank 0's temporary directory, on every rank of `group` (one output directory, as a trainer
    on a shared file system has). No rank leaves before all have: rank 0 removes the directory on
    exit, and a peer still reading it (a trainer sorting its checkpoints) would find it gone. A
    peer that never arrives raises after `timeout` seconds instead of hanging."""
    with tempfile.TemporaryDirectory() as tmp:
        holder = [tmp]
        dist.broadcast_object_list(holder, src=0, group=group)
        yield holder[0]
        dist.monitored_barrier(group, timeout=datetime.timedelta(seconds=timeout))


def main(scenarios, default=None):
    """Joins a Gloo group over a FileStore, runs each requested scenario
    (scenarios[name](rank, world, group) -> dict of measurements; --scenarios a,b or "all";
    unset: default(world), or all) and writes
    DIR/rank<R>.json: {name: {"ok": bool, "error": str, "trace": str, "seconds": float (wall),
    "cpu_seconds": float (this process), ...}}. A barrier after each
    scenario keeps the ranks in step, so one failing scenario does not desynchronise the next."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--scenarios", default="")
    args = parser.parse_args()
    if args.scenarios in ("", "all"):
        names = list(default(args.world)) if default is not None and not args.scenarios else list(scenarios)
    else:
        names = args.scenarios.split(",")
    torch.set_num_threads(1)
    store = dist.FileStore(args.store, args.world)
    dist.init_process_group(
        "gloo", store=store, rank=args.rank, world_size=args.world, timeout=datetime.timedelta(seconds=120)
    )
    group = dist.group.WORLD
    results = {}
    finished = False
    try:
        for name in names:
            start, cpu = time.monotonic(), time.process_time()
            try:
                results[name] = {"ok": True, **scenarios[name](args.rank, args.world, group)}
            except Exception as e:  # reported, asserted on by the test
                error = "%s: %s" % (type(e).__name__, e)
                results[name] = {"ok": False, "error": error, "trace": traceback.format_exc()}
                # In the log too: where the peers then hang in the barrier, the result file is lost.
                print("rank %d: scenario %s raised:\n%s" % (args.rank, name, results[name]["trace"]), file=sys.stderr)
            results[name]["seconds"] = time.monotonic() - start
            results[name]["cpu_seconds"] = time.process_time() - cpu
            dist.barrier()
        with open(os.path.join(args.out, "rank%d.json" % args.rank), "w") as f:
            json.dump(results, f, indent=1)
        finished = True
    finally:
        # No Gloo work left to interpreter teardown (issue 38); the barrier only where every rank
        # got here: after an error the peers may never reach it.
        frameshard.shut_down(peers_alive=finished)
    # Its result file written: end without torch's teardown at finalization (docs/reliability.md).
    _shutdown.exit_now(0)
