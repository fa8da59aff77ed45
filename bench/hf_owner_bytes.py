"""Visual bytes received and rows held per rank: frameshard.hf with gather "owner" (the merge
after the split, hf/_cp_owner.py) against gather "all", under hf.context_parallel.

    PYTHONPATH=build-py/python-dev .venv/bin/python bench/hf_owner_bytes.py [--cp 2] [--steps 10]
        [--family qwen3_vl] [--presets doc,multi,video,mixed] [--split-frames]

Spawns --cp Gloo ranks (CPU). Every rank builds `python -m frameshard ab`'s tiny random model of
--family (the default recipe's sizes, float32) and its batches (cli/_batch.py: the C++ core's seeded
presets, scale 6, 16 text tokens around every frame), installs hf.enable (frame sharding on, the
default recipe's thresholds) and hf.context_parallel (load-balanced split) and runs one forward per
step with each gather. Counted, not timed (exact for a batch; the allocator's peak on CPU is not a
usable figure):

- visual bytes received: the rows of the vision module's outputs (embeddings and, for Qwen3-VL,
  DeepStack features) that reach this rank from another rank: with "all" every row it did not
  encode (the all-gather), with "owner" the rows of its own sequence chunks that another rank
  encoded (the owner all-to-all). The encoder of each row is read from the plan (its ranks' pixel
  ranges), the owner of each row from the token owners the owner path passed;
- visual rows held after the gather: every row ("all") or this rank's ("owner", checked against
  what the owner path received);
- inputs_embeds rows held: the whole sequence ("all": transformers' forward merges on the whole
  sequence, then the language model cuts it) or this rank's rows with their end padding ("owner").

Per preset: the mean over steps of the largest rank's figure, and owner / all (the C++ trainer's
figure for the visual bytes received is 0.485 of the all-gather's at CP 2; docs/guide.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _encoders(plan, merge: int) -> torch.Tensor:
    """The rank that encoded each visual row (token) of a vision call."""
    rows = torch.full((int(plan.total_patch_rows),), -1, dtype=torch.int64)
    for r, rp in enumerate(plan.ranks):
        for a, b in rp.pixel_ranges:
            rows[a:b] = r
    if not plan.sharded:
        rows[:] = -2  # replicated: every rank encodes every row
    return rows[:: merge * merge]


def _rank(rank: int, world: int, store: str, out: str, args) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    import frameshard  # noqa: PLC0415
    from frameshard import _shard, hf  # noqa: PLC0415
    from frameshard.cli import _ab  # noqa: PLC0415
    from frameshard.cli._batch import Geometry, make_batch  # noqa: PLC0415
    from frameshard.hf import _cp_owner  # noqa: PLC0415

    calls = []
    original = _shard.shard_vision

    def recording(*a, **kw):
        result, plan = original(*a, **kw)
        outs = result if isinstance(result, (tuple, list)) else [result]
        row_bytes = sum(int(o.shape[1]) * o.element_size() for o in outs)
        calls.append((plan, kw.get("token_owner"), row_bytes))
        return result, plan

    _shard.shard_vision = recording
    recipe, _ = _ab.resolve_recipe(None, [], **{"model.family": args.family, "distributed.cp_size": world})
    results = {}
    for preset in args.presets:
        recipe["data.preset"] = preset
        for gather in ("all", "owner"):
            torch.manual_seed(0)
            model = _ab.tiny_model(recipe)
            geo = Geometry.of(model.config)
            fields = {k[len(_ab.FS) + 1 :]: v for k, v in recipe.items() if k.startswith(_ab.FS + ".")}
            fields.update(enabled=True, gather=gather, split_frames=args.split_frames)
            hf.enable(model, dist.group.WORLD, frameshard.FrameShardingConfig(**fields), timeout=120)
            cp = hf.context_parallel(model, dist.group.WORLD, timeout=120)
            rows = []
            for step in range(args.steps):
                batch = make_batch(recipe, step, geo)
                calls.clear()
                with torch.no_grad():
                    cp(**batch)
                ((plan, owners, row_bytes),) = calls
                enc = _encoders(plan, geo.merge)
                total = int(enc.numel())
                seq = int(batch["input_ids"].shape[1])
                hidden = int(model.config.text_config.hidden_size)
                if gather == "all":
                    received = 0 if not plan.sharded else int((enc != rank).sum())
                    held = total
                    embeds = seq
                else:
                    own = torch.tensor(owners) == rank
                    received = 0 if not plan.sharded else int((own & (enc != rank)).sum())
                    held = int(own.sum())
                    stats = _cp_owner.last_stats(model)
                    assert stats.visual_rows == held, (stats.visual_rows, held)
                    embeds = stats.embeds_rows
                rows.append(
                    dict(
                        received_bytes=received * row_bytes,
                        held_bytes=held * row_bytes,
                        embeds_bytes=embeds * hidden * 4,
                        path=plan.path,
                        visual_rows=total,
                        seq=seq,
                    )
                )
            cp.remove()
            hf.disable(model)
            results["%s/%s" % (preset, gather)] = rows
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(results, f)
    frameshard.shut_down()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cp", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--family", default="qwen3_vl")
    parser.add_argument("--presets", default="doc,multi,video,mixed")
    parser.add_argument("--split-frames", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.presets = args.presets.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(
            _rank, args=(args.cp, os.path.join(tmp, "store"), tmp, args), nprocs=args.cp, start_method="spawn"
        )
        ranks = [json.load(open(os.path.join(tmp, "rank%d.json" % r))) for r in range(args.cp)]
    report = {}
    print("%s, CP %d, %d steps per preset (mean over steps of the largest rank)" % (args.family, args.cp, args.steps))
    head = ["preset", "visual bytes received, all -> owner", "ratio", "visual rows held", "ratio"]
    print("| %s |" % " | ".join(head + ["inputs_embeds rows held", "ratio"]))
    print("|---|---|---|---|---|---|---|")
    for preset in args.presets:
        fig = {}
        for gather in ("all", "owner"):
            for key in ("received_bytes", "held_bytes", "embeds_bytes"):
                steps = zip(*(r["%s/%s" % (preset, gather)] for r in ranks), strict=True)
                per_step = [max(rank_row[key] for rank_row in step) for step in steps]
                fig[(gather, key)] = sum(per_step) / len(per_step)
        line = {}
        cells = []
        for key in ("received_bytes", "held_bytes", "embeds_bytes"):
            a, o = fig[("all", key)], fig[("owner", key)]
            ratio = o / a if a else float("nan")
            line[key] = dict(all=a, owner=o, ratio=ratio)
            cells += ["%.1f KiB -> %.1f KiB" % (a / 1024, o / 1024), "%.3f" % ratio]
        paths = sorted({r["path"] for r in ranks[0]["%s/all" % preset]})
        report[preset] = dict(line, paths=paths)
        print("| %s | %s |" % (preset, " | ".join(cells)))
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
