"""`python -m frameshard <command>`: the Python package's command line.

    python -m frameshard --version
    python -m frameshard calibrate --model-dir DIR --out cal.txt [--device cuda] [--dtype bfloat16]
    python -m frameshard calibrate --family qwen3_vl --width 256 --depth 4 --out cal.txt

Exit codes: 0 success, 2 an error (one "error: " line), as the C++ `frameshard` tool.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

import torch

import frameshard

from . import hf_towers
from ._C import FrameshardError
from .calibrate import DEFAULT_SIZES, calibrate

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def _calibrate(args: argparse.Namespace) -> int:
    if args.model_dir:
        visual = hf_towers.vision_module_from_config_dir(args.model_dir, attn=args.attn)
        what = args.model_dir
    else:
        visual = hf_towers.vision_module(args.family, args.width, args.depth, attn=args.attn)
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
    src.add_argument("--family", default="qwen3_vl", choices=sorted(hf_towers.FAMILY_CLASSES))
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
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.version:
        print(frameshard.build_info()["text"], end="")
        return 0
    if not getattr(args, "command", None):
        parser().print_usage(sys.stderr)
        print("error: expected a command (calibrate) or --version, got none", file=sys.stderr)
        return 2
    try:
        return int(args.run(args))
    except (FrameshardError, OSError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
