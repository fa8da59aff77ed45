#!/usr/bin/env python3
"""Where a sharded call's CPU goes, per rank: frameshard.hf.enable on a transformers tower.

Starts --cp Gloo rank processes (one torch thread each) that build the same random transformers
vision module and batch as bench/hf_vision_ab.py, enable it (split_frames unless --whole, the
cost_alpha of --cost-alpha) and time each call's parts with the process CPU clock:

  forward, backward      the vision call and loss.backward() (the whole call: forward + backward)
  tower_fwd              the class forward on this rank's frames (the K/V exchanges included)
  exchange_fwd           the forward K/V exchanges of split frames (consensus and all-to-all)
  piece_geometry         the whole frames' positions restricted to this rank's pieces
  outside_fwd            forward - tower_fwd: planning, the consensus, the gather, the online sample
  gather_bwd             backward until the tower's outputs get their gradient (the gather's)
  tower_bwd              the rest of the backward: the tower's, with its exchanges

Median over the calls after --warmup, in ms, one column per rank; then the plan's patch rows per
rank and the online fit, if any.

    PYTHONPATH=build/python-dev .venv/bin/python bench/hf_split_breakdown.py --preset doc --cp 4
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

PARTS = (
    "forward", "backward", "tower_fwd", "exchange_fwd", "piece_geometry", "outside_fwd", "gather_bwd",
    "tower_bwd",
)  # fmt: skip


def instrument(times):
    """Wraps frameshard.hf's local tower call, exchange and piece geometry to add their CPU
    seconds to `times`; the tower's outputs record when their gradient arrives."""
    from frameshard.hf import _split, _vision

    def add(key, seconds):
        times[key] = times.get(key, 0.0) + seconds

    call = _vision._LocalTower.__call__

    def tower_call(self, pv, grid, cu, *, pieces, exchange):
        start = time.process_time()
        out = call(self, pv, grid, cu, pieces=pieces, exchange=exchange)
        add("tower_fwd", time.process_time() - start)

        def arrived(grad):
            times.setdefault("grad_at", time.process_time())

        for o in out:
            if o.requires_grad:
                o.register_hook(arrived)
        return out

    run_split, piece_geometry = _split.run_split, _split.piece_geometry

    def timed_run_split(visual, family, run, grid, cu, pieces, exchange):
        if exchange is not None:
            inner = exchange

            def exchange(rows):
                start = time.process_time()
                out = inner(rows)
                add("exchange_fwd", time.process_time() - start)
                return out

        return run_split(visual, family, run, grid, cu, pieces, exchange)

    def timed_piece_geometry(*args, **kwargs):
        start = time.process_time()
        out = piece_geometry(*args, **kwargs)
        add("piece_geometry", time.process_time() - start)
        return out

    _vision._LocalTower.__call__ = tower_call
    _split.run_split, _split.piece_geometry = timed_run_split, timed_piece_geometry


def worker(rank, args, store):
    import torch
    import torch.distributed as dist

    import frameshard
    from frameshard import hf
    from frameshard.hf import _random as hf_towers

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hf_vision_ab import batch_grid

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", store=dist.FileStore(store, args.cp), rank=rank, world_size=args.cp,
        timeout=datetime.timedelta(seconds=600),
    )  # fmt: skip
    visual = hf_towers.vision_module(args.family, args.width, args.depth)
    c = visual.config
    grid = torch.tensor([list(g) for g in batch_grid(args.preset, args.seed, args.scale)], dtype=torch.int64)
    pv = torch.randn(int(grid.prod(-1).sum()), c.in_channels * c.temporal_patch_size * c.patch_size**2)
    times = {}
    instrument(times)
    config = frameshard.FrameShardingConfig(
        enabled=True, min_tokens=0, min_frames=0, split_frames=not args.whole, cost_alpha=args.cost_alpha
    )
    hf.enable(visual, dist.group.WORLD, config)
    weights, calls = None, []
    for _ in range(args.warmup + args.calls):
        visual.zero_grad(set_to_none=True)
        times.clear()
        dist.barrier()
        start = time.process_time()
        out = visual(pv, grid_thw=grid)
        outs = [out.pooler_output] + list(getattr(out, "deepstack_features", None) or [])
        if weights is None:
            gens = [torch.Generator().manual_seed(1000 * i + rank) for i in range(len(outs))]
            weights = [torch.randn(o.shape, generator=g) for o, g in zip(outs, gens, strict=True)]
        loss = sum((w * o).sum() for w, o in zip(weights, outs, strict=True))
        middle = time.process_time()
        loss.backward()
        end = time.process_time()
        grad_at = times.get("grad_at", middle)
        calls.append(
            dict(
                forward=middle - start,
                backward=end - middle,
                tower_fwd=times.get("tower_fwd", 0.0),
                exchange_fwd=times.get("exchange_fwd", 0.0),
                piece_geometry=times.get("piece_geometry", 0.0),
                outside_fwd=middle - start - times.get("tower_fwd", 0.0),
                gather_bwd=grad_at - middle,
                tower_bwd=end - grad_at,
            )  # fmt: skip
        )
    median = {k: 1e3 * statistics.median(c[k] for c in calls[args.warmup :]) for k in PARTS}
    gathered = [None] * args.cp
    dist.all_gather_object(gathered, median)
    states = frameshard.online_costs()
    fit = next(iter(states.values())) if states else None
    if rank == 0:
        print(
            "hf_split_breakdown: %s width %d depth %d, %s at scale %d, CP %d, %s, cost_alpha %s; "
            "median of calls %d-%d, process CPU ms per rank"
            % (
                args.family,
                args.width,
                args.depth,
                args.preset,
                args.scale,
                args.cp,
                "whole frames" if args.whole else "split frames",
                args.cost_alpha,
                args.warmup + 1,
                args.warmup + args.calls,
            )  # fmt: skip
        )
        for k in PARTS:
            print("  %-15s %s" % (k, " ".join("%8.1f" % g[k] for g in gathered)))
        if fit is not None:
            print("  patch rows      %s" % " ".join("%8d" % r for r in fit.rank_patch_rows))
            print("  fit: %s" % fit.fit)
    hf.disable(visual)
    frameshard.shut_down()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="qwen3_vl")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--preset", default="doc", help="as hf_vision_ab.py's --presets (one)")
    ap.add_argument("--scale", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cp", type=int, default=4)
    ap.add_argument("--cost-alpha", default="online")
    ap.add_argument("--whole", action="store_true", help="whole frames (split_frames off)")
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--calls", type=int, default=8)
    args = ap.parse_args()
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args, os.path.join(tmp, "store")), nprocs=args.cp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
