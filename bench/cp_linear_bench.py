"""Qwen3.5's linear attention (transformers' GatedDeltaNet) under context parallelism: the
divided layer (frameshard/hf/_cp_linear.py: each rank runs its own rows, conv halos and segment
states exchanged) against the gathered one (input all-gathered, the layer run on the whole
sequence on every rank), forward + backward of one layer.

    PYTHONPATH=build-py/python-dev .venv/bin/python bench/cp_linear_bench.py \
        [--cp 2,4] [--seq 8192] [--batch 1] [--hidden 256] [--heads 4] [--key-heads 4] [--head-dim 64] \
        [--split load_balanced] [--reps 3] [--dtype float32] [--threads 1]
    ... bench/cp_linear_bench.py --check      # parity only: float64, batch 2, GVA heads, CP 2 and 3

One process per rank on this machine, Gloo over loopback, `--threads` intra-op threads each.
On a machine with fewer cores than ranks the processes share the cores: the wall time is then
not the parallel time; the per-rank CPU seconds (process time, all threads) are the work each
rank does. Printed per CP and variant: the median wall seconds per forward + backward (the
slowest rank, barriers around) and each rank's median CPU seconds; then the max difference of
the two variants' outputs and input gradients (and, with --check, of the divided layer against
the unsharded layer run on one process, parameter gradients SUM-all-reduced).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def build_layer(args: argparse.Namespace, dtype: torch.dtype) -> torch.nn.Module:
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m  # noqa: PLC0415

    config = m.Qwen3_5TextConfig(
        hidden_size=args.hidden,
        linear_num_value_heads=args.heads,
        linear_num_key_heads=args.key_heads,
        linear_key_head_dim=args.head_dim,
        linear_value_head_dim=args.head_dim,
        linear_conv_kernel_dim=4,
        num_hidden_layers=1,
        layer_types=["linear_attention"],
    )
    torch.manual_seed(0)
    layer = m.Qwen3_5GatedDeltaNet(config, 0).to(dtype)
    with torch.no_grad():  # the trained model's ranges: decays in (0, 1), a moderate A
        layer.A_log.copy_(torch.empty(args.heads).uniform_(0.0, 1.5).log())
        layer.dt_bias.normal_(0, 0.5)
        layer.norm.weight.normal_(1, 0.1)
    return layer


def run(rank: int, world: int, store: str, args: argparse.Namespace, out: dict) -> None:
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    import frameshard  # noqa: PLC0415
    from frameshard.hf import _cp, _cp_layout, _cp_linear  # noqa: PLC0415

    group = dist.group.WORLD
    dtype = getattr(torch, args.dtype)
    layer = build_layer(args, dtype)
    seq = args.seq
    torch.manual_seed(1)
    whole = torch.randn(args.batch, seq, args.hidden, dtype=dtype)
    grad_out = torch.randn(args.batch, seq, args.hidden, dtype=dtype)
    state = _cp._State(group=group, split=args.split, timeout=120, linear=[layer])
    fwd = state.layout(seq, whole.device, torch.tensor([args.batch, seq, args.hidden]))
    pad = int(fwd.order.numel()) - seq
    local_in = _cp_layout.pad(whole, pad, dim=1)[:, fwd.positions]
    local_grad = _cp_layout.pad(grad_out, pad, dim=1)[:, fwd.positions]
    variants = {"divided": _cp_linear.forward, "gathered": _cp_linear._gathered}
    result = {}
    for name, fn in variants.items():
        walls, cpus = [], []
        for rep in range(args.reps + 1):  # the first is a warm-up
            layer.zero_grad(set_to_none=True)
            x = local_in.clone().requires_grad_(True)
            dist.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            y = fn(layer, fwd, x)
            y.backward(local_grad)
            c1 = time.process_time()
            dist.barrier()
            if rep:
                walls.append(time.perf_counter() - t0)
                cpus.append(c1 - c0)
        grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
        for g in grads.values():
            dist.all_reduce(g, group=group)
        result[name] = dict(
            wall=statistics.median(walls) if walls else 0.0,
            cpu=statistics.median(cpus) if cpus else 0.0,
            out=y.detach(),
            grad_in=x.grad,
            grads=grads,
        )
    real = fwd.positions < seq
    report = {
        "wall": {n: r["wall"] for n, r in result.items()},
        "cpu": {n: r["cpu"] for n, r in result.items()},
        "out_diff": float((result["divided"]["out"] - result["gathered"]["out"])[:, real].abs().max()),
        "grad_in_diff": float((result["divided"]["grad_in"] - result["gathered"]["grad_in"])[:, real].abs().max()),
        "param_grad_diff": max(  # relative to max(1, the gradient's largest entry)
            float((result["divided"]["grads"][n] - g).abs().max() / max(1.0, float(g.abs().max())))
            for n, g in result["gathered"]["grads"].items()
        ),
        "rows": _cp_linear.processed(fwd),
    }
    if args.check:  # against the unsharded layer on one process
        ref = build_layer(args, dtype)
        x = whole.clone().requires_grad_(True)
        y = ref(x)
        y.backward(grad_out)
        p = fwd.positions[real]
        d = result["divided"]
        report["ref_out_diff"] = float((d["out"][:, real] - y.detach()[:, p]).abs().max())
        report["ref_out_scale"] = float(y.detach().abs().max())
        report["ref_grad_in_diff"] = float((d["grad_in"][:, real] - x.grad[:, p]).abs().max())
        report["ref_param_grad_diff"] = max(
            float((d["grads"][n] - q.grad).abs().max() / max(1.0, float(q.grad.abs().max())))
            for n, q in ref.named_parameters()
        )
    out[rank] = report
    frameshard.shut_down()


def worker(rank: int, world: int, store: str, args: argparse.Namespace, queue) -> None:
    out: dict = {}
    run(rank, world, store, args, out)
    queue.put((rank, out[rank]))


def launch(world: int, args: argparse.Namespace) -> list:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=worker, args=(r, world, store, args, queue)) for r in range(world)]
        for p in procs:
            p.start()
        reports = [report for _, report in sorted(queue.get() for _ in procs)]  # in rank order
        for p in procs:
            p.join()
            if p.exitcode:
                raise SystemExit("a rank exited %d" % p.exitcode)
    return reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cp", default="2,4")
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4, help="value heads")
    parser.add_argument("--key-heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--split", default="load_balanced")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--check", action="store_true", help="parity only: float64, 2 x 125 tokens, GVA, CP 2,3")
    args = parser.parse_args()
    runs = [(int(c), args.split) for c in args.cp.split(",")]
    if args.check:
        args.batch, args.seq, args.hidden, args.heads, args.key_heads, args.head_dim = 2, 125, 48, 4, 2, 8
        args.dtype, args.reps = "float64", 0
        runs = [(c, s) for c in (2, 3) for s in ("load_balanced", "contiguous")]
    import transformers  # noqa: PLC0415

    print(
        "cp_linear_bench: transformers %s, torch %s, batch %d, seq %d, hidden %d, %d value / %d key heads of %d, %s, "
        "%d thread(s) per rank, %d core(s) on this machine"
        % (
            transformers.__version__,
            torch.__version__,
            args.batch,
            args.seq,
            args.hidden,
            args.heads,
            args.key_heads,
            args.head_dim,
            args.dtype,
            args.threads,
            os.cpu_count(),
        )
    )
    failed = False
    for cp, split in runs:
        args.split = split
        reports = launch(cp, args)
        for r, rep in enumerate(reports):
            rows = rep["rows"]  # the divided calls' first, the gathered ones' last
            line = "cp %d %-13s rank %d: recurrence rows divided %d, gathered %d" % (cp, split, r, rows[0], rows[-1])
            if not args.check:
                line += ", cpu s divided %.3f gathered %.3f" % (rep["cpu"]["divided"], rep["cpu"]["gathered"])
            line += ", vs gathered: out %.2g, grad_in %.2g, param grads (rel) %.2g" % (
                rep["out_diff"],
                rep["grad_in_diff"],
                rep["param_grad_diff"],
            )
            if args.check:
                line += "; vs unsharded: out %.2g (scale %.2g), grad_in %.2g, param grads (rel) %.2g" % (
                    rep["ref_out_diff"],
                    rep["ref_out_scale"],
                    rep["ref_grad_in_diff"],
                    rep["ref_param_grad_diff"],
                )
                failed |= max(rep["ref_out_diff"], rep["ref_grad_in_diff"], rep["ref_param_grad_diff"]) > 1e-5
            print(line)
        if not args.check:
            wall = {n: max(rep["wall"][n] for rep in reports) for n in ("divided", "gathered")}
            print(
                "cp %d %-13s wall s per forward+backward: divided %.3f, gathered %.3f (x%.2f); "
                "CPU s summed over ranks: divided %.3f, gathered %.3f"
                % (
                    cp,
                    split,
                    wall["divided"],
                    wall["gathered"],
                    wall["gathered"] / max(wall["divided"], 1e-9),
                    sum(rep["cpu"]["divided"] for rep in reports),
                    sum(rep["cpu"]["gathered"] for rep in reports),
                )
            )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
