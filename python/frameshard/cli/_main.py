"""`python -m frameshard <command>`: the Python package's command line (frameshard/__main__.py).

    python -m frameshard --version
    python -m frameshard calibrate --model-dir DIR --out cal.txt [--device cuda] [--dtype bfloat16]
    python -m frameshard calibrate --family qwen3_vl --width 256 --depth 4 --out cal.txt
    python -m frameshard ab --family qwen2_5_vl --cp 2 --steps 6 [--json] [--config R.yaml] [--a.b V]
    python -m frameshard train --family qwen3_vl --cp 2 [--distributed.multimodal.vision.frame_sharding.enabled false]
    python -m frameshard train --cp 2 --dp 2 [--distributed.multimodal.vision.frame_sharding.mesh_dims '[dp, cp]']
    torchrun --standalone --nproc-per-node 2 -m frameshard train --cp 2 --json   # one rank per process

Exit codes: 0 success, 2 an error (one "error: " line), as the C++ `frameshard` tool.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch

import frameshard

from .._C import FrameshardError
from .._calibrate import DEFAULT_SIZES, calibrate
from ..hf import _random

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def _calibrate(args: argparse.Namespace) -> int:
    if args.model_dir:
        visual = _random.vision_module_from_config_dir(args.model_dir, attn=args.attn)
        what = args.model_dir
    else:
        visual = _random.vision_module(args.family, args.width, args.depth, attn=args.attn)
        what = "%s width %d depth %d (random weights)" % (args.family, args.width, args.depth)
    torch.set_num_threads(args.threads)
    visual.to(device=args.device, dtype=DTYPES[args.dtype])
    result = calibrate(
        visual,
        args.out,
        sizes=args.sizes,
        repeats=args.repeats,
        backward=not args.forward_only,
        clock=args.clock,
    )
    print("frameshard calibrate: %s" % what)
    print(result.text, end="")
    print("wrote %s: quadratic a=%g, b=%g, c=%g" % (args.out, result.a, result.b, result.c))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m frameshard", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="store_true", help="print the build's facts and exit")
    sub = p.add_subparsers(dest="command")
    c = sub.add_parser("calibrate", help="time a transformers vision tower and write the cost model")
    src = c.add_mutually_exclusive_group()
    src.add_argument("--model-dir", help="checkpoint directory (its config.json; weights unused)")
    src.add_argument("--family", default="qwen3_vl", choices=sorted(_random.families()))
    c.add_argument("--width", type=int, default=256, help="tower width (with --family)")
    c.add_argument("--depth", type=int, default=4, help="tower depth (with --family)")
    c.add_argument("--out", default="calibration.txt", help="calibration file to write")
    c.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES), help="patch rows per frame")
    c.add_argument("--repeats", type=int, default=3)
    c.add_argument("--forward-only", action="store_true")
    c.add_argument("--clock", default="auto", choices=["auto", "cpu", "wall", "cuda"])
    c.add_argument("--device", default="cpu")
    c.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    c.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    c.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    c.set_defaults(run=_calibrate)
    for name, what in (
        ("train", "train a tiny transformers Qwen-VL with CP (one arm)"),
        ("ab", "train it twice, vision replicated and frame-sharded, and compare"),
    ):
        t = sub.add_parser(name, help=what)
        t.add_argument("--config", help="a recipe YAML (the C++ commands' keys); --a.b VALUE overrides a key")
        t.add_argument("--family", default=None, help="model.family: qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_5")
        t.add_argument("--model-dir", default=None, help="model.model_dir: a Hugging Face checkpoint (its weights)")
        t.add_argument("--cp", type=int, default=None, help="distributed.cp_size: CP ranks per replica")
        t.add_argument(
            "--dp", type=int, default=None, help="distributed.dp_size: data-parallel replicas (dp x cp ranks)"
        )
        t.add_argument("--steps", type=int, default=None, help="train.steps")
        t.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
        t.add_argument("--print-config", action="store_true", help="print the resolved recipe and exit")
        if name == "ab":
            t.add_argument("--plot", default="frameshard_ab.svg", help="SVG of both arms' losses and step times")
        t.set_defaults(run=_train)
    return p


def _train(args: argparse.Namespace) -> int:
    from . import _ab  # noqa: PLC0415  (imports transformers)

    return _ab.main(args, args.overrides)


def _overrides(extra: Sequence[str]) -> list[tuple[str, str]]:
    """`--a.b VALUE` pairs (the recipe's dotted overrides) from the arguments argparse left."""
    pairs, rest = [], list(extra)
    while rest:
        key = rest.pop(0)
        if not key.startswith("--") or "." not in key or not rest:
            raise FrameshardError("frameshard: expected --section.key VALUE overrides, got %r" % key)
        pairs.append((key[2:], rest.pop(0)))
    return pairs


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = parser().parse_known_args(argv)
    if extra and getattr(args, "command", None) not in ("train", "ab"):
        parser().error("unrecognized arguments: %s" % " ".join(extra))
    if args.version:
        print(frameshard.build_info()["text"], end="")
        return 0
    if not getattr(args, "command", None):
        parser().print_usage(sys.stderr)
        print("error: expected a command (calibrate, train, ab) or --version, got none", file=sys.stderr)
        return 2
    try:
        args.overrides = _overrides(extra)
        return int(args.run(args))
    except (FrameshardError, OSError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
