"""`python -m frameshard train` and `python -m frameshard ab` on a transformers Qwen-VL model.

    python -m frameshard ab --family qwen2_5_vl --cp 2 --steps 6 --json
    python -m frameshard train --family qwen3_vl --cp 2 --train.steps 4 --data.preset doc
    python -m frameshard ab --config recipe.yaml --distributed.multimodal.vision.frame_sharding.min_tokens 0
    python -m frameshard ab --model-dir /path/to/Qwen2.5-VL-3B-Instruct --cp 2 --steps 4
    python -m frameshard train --cp 2 --dp 2 --distributed.multimodal.vision.frame_sharding.mesh_dims '[dp, cp]'
    torchrun --standalone --nproc-per-node 2 -m frameshard train --cp 2 --json

A tiny random model of `--family` (no download; sizes from the recipe's `model.` keys, as the
C++ commands' small VLM) or a checkpoint (`--model-dir`, model.model_dir: its family, sizes,
weights and token ids; the batches use its placeholder ids and draw text ids below its special
ones), CP over `--cp N` Gloo ranks (x `--dp M` data-parallel replicas, each its own batches;
spawned here, or one per process under torchrun: cli/_launch.py; `--cp 1`: the plain unsharded
model): the language model under frameshard.hf.context_parallel
(load-balanced split), the vision tower replicated on every rank (frame sharding off) or sharded
by frameshard.hf.enable (on; frame_sharding.mesh_dims [cp] within each replica's CP group, [dp, cp]
over the whole mesh). `train` runs the recipe's arm, `ab` both with the same seed,
batches and topology, and compares them. Batches (cli/_batch.py): the C++ core's seeded presets
(frameshard.workload, h and w divided by `data.scale`), every frame one image of the prompt,
`data.text_tokens` text tokens before each and at the end; a new batch every step. `data.preset
grpo`: one prompt drawn like `mixed`, sampled `data.group_size` times (default 8), its images
bit-identical in every sample, as a GRPO group's; with frame_sharding.dedup the sharded arm
encodes each distinct image once.

Measured per step and rank (a step's figure is its slowest rank's; means leave out step 0):
`step_seconds` (wall), `vision_seconds` (the vision module's forward, from its call to its
return, plus its backward, from the gradient reaching its output to the gradient of its patch
embedding: the gather and its backward included), the loss (summed over the ranks, divided by dp:
the mean over replicas of the unsharded mean), `peak_bytes` and `vision_peak_bytes` (see
cli/_train.py `_Memory`). `train --json` prints the arm's object at the top level, as the C++
`frameshard train --json`; `ab --json` the ratios and one object per arm, as the C++ `ab --json`.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from .. import _C
from .._C import FrameshardError
from ._models import (  # noqa: F401  (re-exported: the tests and bench read them here)
    FAMILIES,
    FS,
    MERGE,
    PATCH,
    TEMPORAL,
    TOKENS,
    checkpoint_family,
    checkpoint_model,
    frame_sharding,
    tiny_model,
)
from ._report import compare, summarize, table

# The recipe keys the Python commands read (the C++ recipe's names; others are refused).
DEFAULT_RECIPE: dict[str, Any] = {
    "distributed.cp_size": 2,
    "distributed.dp_size": 1,
    FS + ".enabled": True,
    FS + ".mesh_dims": ["cp"],
    FS + ".min_tokens": 56,
    FS + ".min_frames": 32,
    FS + ".min_local_patch_rows": 96,
    FS + ".cost_alpha": "auto",
    FS + ".partitioner": "optimal",
    FS + ".gather": "all",
    FS + ".dedup": False,
    "model.family": "qwen2_5_vl",
    "model.model_dir": "",
    "model.vision_depth": 2,
    "model.vision_hidden": 64,
    "model.vision_heads": 2,
    "model.text_hidden": 64,
    "model.text_layers": 2,
    "model.text_heads": 4,
    "model.text_ffn": 128,
    "model.vocab_size": 256,
    "data.preset": "mixed",
    "data.group_size": 8,
    "data.scale": 6,
    "data.text_tokens": 16,
    "data.seed": 0,
    "train.steps": 30,
    "train.lr": 0.001,
    "train.weight_decay": 0.01,
    "train.seed": 0,
    "train.timeout_ms": 120000,
}


def scalar(text: str) -> Any:
    """A dotted override's value as YAML reads a scalar: bool, int, float or string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip().strip("'\"")


def _flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        key = prefix + str(k)
        out.update(_flatten(v, key + ".") if isinstance(v, dict) else {key: v})
    return out


def resolve_recipe(config: str | None, overrides: list[tuple[str, str]], **flags: Any) -> tuple[dict, list]:
    """(recipe, ignored keys): the default recipe, then `config` (a YAML recipe, read with
    PyYAML), then the dotted overrides, then the explicit flags (--cp, --steps, --family) where
    given. Keys of the C++ recipe that the Python commands do not use (model.tower, ...) are
    ignored and listed; a key outside its sections is an error."""
    recipe = dict(DEFAULT_RECIPE)
    given: dict[str, Any] = {}
    if config:
        try:
            import yaml  # noqa: PLC0415  (only for --config)
        except ImportError as e:
            raise FrameshardError("frameshard train: expected PyYAML for --config, got %s" % e) from None

        with open(config, encoding="utf-8") as f:
            given.update(_flatten(yaml.safe_load(f) or {}))
    given.update({k: scalar(v) for k, v in overrides})
    given.update({k: v for k, v in flags.items() if v is not None})
    ignored = []
    for key, value in given.items():
        if key in recipe:
            recipe[key] = value
        elif key.startswith(("model.", "data.", "train.", "distributed.")):
            ignored.append(key)
        else:
            raise FrameshardError("frameshard train: expected a recipe key, got %r" % key)
    if recipe["model.family"] not in FAMILIES:
        raise FrameshardError(
            "frameshard train: expected model.family one of %s, got %r" % (", ".join(FAMILIES), recipe["model.family"])
        )
    for key in ("distributed.cp_size", "distributed.dp_size"):
        v = recipe[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise FrameshardError("frameshard train: %s: expected a positive integer, got %r" % (key, v))
    recipe[FS + ".mesh_dims"] = mesh_dims(recipe[FS + ".mesh_dims"])
    return recipe, ignored


def mesh_dims(value: Any) -> list[str]:
    """frame_sharding.mesh_dims as a list: a YAML list, or an override's text ("[dp, cp]")."""
    items = value if isinstance(value, list) else str(value).strip().strip("[]").split(",")
    dims = [str(d).strip().strip("'\"") for d in items if str(d).strip()]
    if dims not in (["cp"], ["dp", "cp"]):
        raise FrameshardError("frameshard train: %s.mesh_dims: expected [cp] or [dp, cp], got %r" % (FS, value))
    return dims


def write_plot(path: str, arms: dict, recipe: dict) -> None:
    """The C++ ab's SVG (frameshard._C.ab_plot_svg): both arms' per-step losses and step times."""
    title = "python -m frameshard ab: %s, CP %d, preset %s" % (
        recipe["model.family"],
        recipe["distributed.cp_size"],
        recipe["data.preset"],
    )
    series = [(name, arm["losses"], arm["step_seconds"]) for name, arm in arms.items()]
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(_C.ab_plot_svg(series, title))
    except OSError as e:
        raise FrameshardError("frameshard ab: --plot: expected a writable file, got %r (%s)" % (path, e)) from None


def _pooled(recipe: dict) -> bool:
    """Whether the sharded arm balances frames over the whole dp x cp mesh (mesh_dims [dp, cp])."""
    return int(recipe["distributed.dp_size"]) > 1 and recipe[FS + ".mesh_dims"] == ["dp", "cp"]


def _arm_name(command: str, recipe: dict, sharded: bool) -> str:
    if int(recipe["distributed.cp_size"]) == 1 and command == "train" and not (sharded and _pooled(recipe)):
        return "unsharded"  # no CP and each replica's tower whole
    return "sharded" if sharded else "replicated"


def _header(command: str, recipe: dict, launched: tuple[int, int] | None) -> str:
    dp = int(recipe["distributed.dp_size"])
    return "frameshard %s: %s, %sCP %d, %d steps, preset %s (scale %d), %s, %s" % (
        command,
        recipe["model.family"],
        "DP %d x " % dp if dp > 1 else "",
        recipe["distributed.cp_size"],
        recipe["train.steps"],
        recipe["data.preset"],
        recipe["data.scale"],
        "checkpoint %s" % recipe["model.model_dir"] if recipe["model.model_dir"] else "tiny random model",
        "ranks from the launcher" if launched else "spawned ranks",
    )


def _report(args: Any, recipe: dict, arms: dict, say: Any) -> int:
    """Rank 0's output: the plot (ab), the table or the JSON, and the exit code."""
    ratios = compare(arms["replicated"], arms["sharded"]) if len(arms) == 2 else None
    if args.command == "ab" and args.plot:
        write_plot(args.plot, arms, recipe)
        say("plot: %s" % args.plot)
    context = {"family": recipe["model.family"], "recipe": recipe}
    if args.json and ratios is None:
        # train: the arm's object at the top level, as the C++ `frameshard train --json`.
        print(json.dumps({**arms[next(iter(arms))], "name": "train", "arm": next(iter(arms)), **context}, indent=1))
    elif args.json:
        print(json.dumps({**ratios, **arms, **context}, indent=1))
    else:
        print(table(arms, ratios))
    diff = ratios["loss_max_abs_diff"] if ratios is not None else 0.0
    if math.isnan(diff) or diff > 1e-5:  # as the C++ ab: the arms must agree (float32)
        print("error: the arms' losses differ by %.3g (> 1e-5)" % diff, file=sys.stderr, flush=True)
        return 1
    return 0


def main(args: Any, overrides: list[tuple[str, str]]) -> int:
    """`python -m frameshard train|ab` (see __main__): prints progress, the table or --json; under
    a launcher (cli/_launch.py) only rank 0 prints."""
    from . import _launch  # noqa: PLC0415  (its ranks import transformers)

    recipe, ignored = resolve_recipe(
        args.config,
        overrides,
        **{
            "distributed.cp_size": args.cp,
            "distributed.dp_size": args.dp,
            "train.steps": args.steps,
            "model.family": args.family,
            "model.model_dir": args.model_dir,
        },
    )
    if recipe["model.model_dir"]:
        # The checkpoint's family and sizes; the recipe's model sizes are unused.
        recipe["model.family"] = checkpoint_family(str(recipe["model.model_dir"]))
    launched = _launch.from_env()
    rank = launched[0] if launched else 0
    if args.print_config:
        if rank == 0:
            print(json.dumps(recipe, indent=1, sort_keys=True))
        return 0
    if launched:
        _launch.check_world(args.command, recipe, launched[1])
    progress = not args.json and rank == 0
    say = (lambda *a: print(*a, flush=True)) if progress else (lambda *a: None)
    say(_header(args.command, recipe, launched))
    if ignored:
        say("ignored recipe keys (not used by the Python commands): %s" % ", ".join(sorted(ignored)))
    wanted = [False, True] if args.command == "ab" else [bool(recipe[FS + ".enabled"])]
    names = [_arm_name(args.command, recipe, sharded) for sharded in wanted]
    how = dict(dedup=bool(recipe[FS + ".dedup"]), dp=int(recipe["distributed.dp_size"]), pooled=_pooled(recipe))
    if launched:
        # One rank per process: both arms here, one after the other (each a fresh model).
        say("arms %s:" % ", ".join(names))
        got = _launch.rank_job(rank, launched[1], None, recipe, wanted, progress)
        if got is None:
            return 0  # not rank 0: rank 0 reports
        arms = {n: summarize(r, s, **how) for n, r, s in zip(names, got, wanted, strict=True)}
    else:
        arms = {}
        for name, sharded in zip(names, wanted, strict=True):
            say("arm %s:" % name)
            arms[name] = summarize(_launch.spawn_arm(recipe, sharded, progress), sharded, **how)
    return _report(args, recipe, arms, say)
