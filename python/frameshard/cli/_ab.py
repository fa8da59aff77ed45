"""`python -m frameshard train` and `python -m frameshard ab` on a transformers Qwen-VL model.

    python -m frameshard ab --family qwen2_5_vl --cp 2 --steps 6 --json
    python -m frameshard train --family qwen3_vl --cp 2 --train.steps 4 --data.preset doc
    python -m frameshard ab --config recipe.yaml --distributed.multimodal.vision.frame_sharding.min_tokens 0
    python -m frameshard ab --model-dir /path/to/Qwen2.5-VL-3B-Instruct --cp 2 --steps 4

A tiny random model of `--family` (no download; sizes from the recipe's `model.` keys, as the
C++ commands' small VLM) or a checkpoint (`--model-dir`, model.model_dir: its family, sizes,
weights and token ids; the batches use its placeholder ids and draw text ids below its special
ones), CP over `--cp N` local Gloo rank processes (spawned here; `--cp 1`:
one process, the plain unsharded model): the language model under frameshard.hf.context_parallel
(load-balanced split), the vision tower replicated on every rank (frame sharding off) or sharded
by frameshard.hf.enable (on). `train` runs the recipe's arm, `ab` both with the same seed,
batches and topology, and compares them. Batches (cli/_batch.py): the C++ core's seeded presets
(frameshard.workload, h and w divided by `data.scale`), every frame one image of the prompt,
`data.text_tokens` text tokens before each and at the end; a new batch every step. `data.preset
grpo`: one prompt drawn like `mixed`, sampled `data.group_size` times (default 8), its images
bit-identical in every sample, as a GRPO group's; with frame_sharding.dedup the sharded arm
encodes each distinct image once.

Measured per step and rank (a step's figure is its slowest rank's; means leave out step 0):
`step_seconds` (wall), `vision_seconds` (the vision module's forward, from its call to its
return, plus its backward, from the gradient reaching its output to the gradient of its patch
embedding: the gather and its backward included), the loss (summed over the ranks: the
unsharded mean), `peak_bytes` and `vision_peak_bytes` (see `_Memory`).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import sys
import tempfile
import time
from typing import Any

import torch

from .. import _C, hf
from .._C import FrameshardError
from .._config import FrameShardingConfig
from .._shard import frame_keys
from ..hf import _family
from ._batch import Geometry, make_batch
from ._report import compare, summarize, table

# The families `train` builds models of: those whose descriptor names model classes.
FAMILIES = tuple(f.name for f in _family.families() if f.model_classes and f.tiny_model is not None)
FS = "distributed.multimodal.vision.frame_sharding"
# The recipe keys the Python commands read (the C++ recipe's names; others are refused).
DEFAULT_RECIPE: dict[str, Any] = {
    "distributed.cp_size": 2,
    FS + ".enabled": True,
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
TOKENS = dict(vision_start_token_id=2, vision_end_token_id=5, image_token_id=3, video_token_id=4)
PATCH, TEMPORAL, MERGE = 14, 2, 2


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
    if recipe[FS + ".gather"] != "all":
        raise FrameshardError(
            "frameshard train: expected %s.gather all (the Python commands merge the visual rows in "
            "transformers' forward, which needs every row; owner routing is the C++ commands'), got %r"
            % (FS, recipe[FS + ".gather"])
        )
    if recipe["model.family"] not in FAMILIES:
        raise FrameshardError(
            "frameshard train: expected model.family one of %s, got %r" % (", ".join(FAMILIES), recipe["model.family"])
        )
    return recipe, ignored


def frame_sharding(recipe: dict, enabled: bool) -> Any:
    fields = {k[len(FS) + 1 :]: v for k, v in recipe.items() if k.startswith(FS + ".")}
    fields["enabled"] = enabled
    return FrameShardingConfig(**fields)


def tiny_model(recipe: dict) -> torch.nn.Module:
    """A random ...ForConditionalGeneration of the recipe's family and sizes (seeded by
    train.seed, so every rank builds the same weights)."""
    import transformers  # noqa: PLC0415

    family = recipe["model.family"]
    hidden, heads = int(recipe["model.text_hidden"]), int(recipe["model.text_heads"])
    half = hidden // heads // 2  # the mrope sections (t, h, w) sum to head_dim / 2
    text = dict(
        vocab_size=int(recipe["model.vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(recipe["model.text_ffn"]),
        num_hidden_layers=int(recipe["model.text_layers"]),
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=hidden // heads,
        bos_token_id=0,
        eos_token_id=1,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [half - 2 * (half // 4), half // 4, half // 4],
        },
    )
    vision = dict(
        depth=int(recipe["model.vision_depth"]),
        num_heads=int(recipe["model.vision_heads"]),
        in_channels=3,
        patch_size=PATCH,
        temporal_patch_size=TEMPORAL,
        spatial_merge_size=MERGE,
    )
    vision["width"] = int(recipe["model.vision_hidden"])
    described = _family.get(family)
    described.tiny_model(vision, text, recipe)  # the family's own sizes and layer layout
    names = described.model_classes
    config = getattr(transformers, names[0])(text_config=text, vision_config=vision, **TOKENS)
    torch.manual_seed(int(recipe["train.seed"]))
    return getattr(transformers, names[1])._from_config(config, attn_implementation="sdpa")


def checkpoint_family(model_dir: str) -> str:
    """The family (model_type of config.json) of a Hugging Face checkpoint directory."""
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        raise FrameshardError(
            "frameshard train: model.model_dir: expected a checkpoint with config.json, got %r" % model_dir
        )
    with open(path, encoding="utf-8") as f:
        family = str(json.load(f).get("model_type", ""))
    if family not in FAMILIES:
        raise FrameshardError(
            "frameshard train: model.model_dir: expected a checkpoint of model_type %s, got %r in %s"
            % (", ".join(FAMILIES), family, path)
        )
    return family


def checkpoint_model(model_dir: str) -> torch.nn.Module:
    """The ...ForConditionalGeneration of a checkpoint directory (model.model_dir) with its
    weights, float32, SDPA attention."""
    import transformers  # noqa: PLC0415

    cls = getattr(transformers, _family.get(checkpoint_family(model_dir)).model_classes[1])
    return cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")


class _Memory:
    """Peak memory of a rank. CUDA: the caching allocator's allocated tensor bytes
    (max_memory_allocated, reset per step; the vision peak is the rise of max allocated during
    the vision forward). CPU -- torch has no allocated-bytes counter there --: the rank
    process's resident set size: `peak_bytes` its high-water mark (getrusage ru_maxrss, since the
    process started: each arm runs in fresh processes), which includes the interpreter, torch and
    transformers and memory glibc has not returned, so it dilutes ratios towards 1;
    `vision_peak_bytes` the rise of the current RSS (/proc/self/statm) across the vision forward
    (large tensors are mmapped and unmapped by glibc, so the rise follows them closely)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def now(self) -> int:
        if self.cuda:
            return int(torch.cuda.max_memory_allocated())
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def reset(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def peak(self) -> int:
        if self.cuda:
            return int(torch.cuda.max_memory_allocated())
        import resource  # noqa: PLC0415

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class _VisionTimer:
    """Times the vision module's forward (call to return) and backward (the gradient reaching
    its output to the gradient of its patch embedding's weight, its last backward step)."""

    def __init__(self, visual: torch.nn.Module, memory: _Memory) -> None:
        self.memory, self.marks, self.rise = memory, {}, 0
        visual.register_forward_pre_hook(lambda *_: self._mark("f0"))
        visual.register_forward_hook(self._done)
        weight = next(visual.patch_embed.parameters())
        weight.register_post_accumulate_grad_hook(lambda _p: self._mark("b1"))

    def _mark(self, name: str) -> None:
        self.marks[name] = time.perf_counter()
        if name == "f0":
            self.before = self.memory.now()

    def _done(self, _module: Any, _args: Any, out: Any) -> None:
        self._mark("f1")
        self.rise = max(self.rise, self.memory.now() - self.before)
        pooled = out.pooler_output if hasattr(out, "pooler_output") else out
        if isinstance(pooled, torch.Tensor) and pooled.requires_grad:
            pooled.register_hook(lambda g: self._mark("b0"))

    def seconds(self) -> float:
        m = self.marks
        return (m["f1"] - m["f0"]) + (m.get("b1", 0.0) - m.get("b0", 0.0))


def _step_loss(model: Any, cp: Any, batch: dict, image_token_id: int) -> torch.Tensor:
    """This rank's loss: labels are the tokens, -100 at the image tokens."""
    labels = batch["input_ids"].masked_fill(batch["input_ids"] == image_token_id, -100)
    if cp is not None:
        return cp(**batch, labels=labels).loss
    logits = model(**batch).logits[0, :-1]
    return torch.nn.functional.cross_entropy(logits.float(), labels[0, 1:], ignore_index=-100)


def _row_bytes(model: Any) -> int:
    """Bytes of one visual row as the vision module returns it: the embedding and, for Qwen3-VL,
    its DeepStack features (float32)."""
    hidden = int(model.config.text_config.hidden_size)
    deepstack = len(getattr(model.config.vision_config, "deepstack_visual_indexes", None) or [])
    return hidden * 4 * (1 + deepstack)


def _count_frames(series: dict, batch: dict, geo: Geometry) -> None:
    """The step's frames, its distinct ones (frameshard.frame_keys, as dedup keys them) and the
    visual rows of the distinct ones (what a dedup gather moves)."""
    grid = batch["image_grid_thw"]
    first: dict = {}
    for i, key in enumerate(frame_keys(batch["pixel_values"], grid)):
        first.setdefault(key, i)
    tokens = (grid.prod(-1) // geo.merge**2).tolist()
    series["frames"].append(len(tokens))
    series["distinct_frames"].append(len(first))
    series["distinct_visual_rows"].append(sum(tokens[i] for i in first.values()))


def _rank_main(rank: int, world: int, store: str, out: str, recipe: dict, sharded: bool, progress: bool) -> None:
    """One rank of one arm (a spawned process): trains train.steps steps, writes out/rank<R>.json."""
    import torch.distributed as dist  # noqa: PLC0415

    torch.set_num_threads(1)
    timeout = float(recipe["train.timeout_ms"]) / 1000.0
    device = torch.device("cpu")
    if torch.cuda.is_available():
        device = torch.device("cuda", rank % torch.cuda.device_count())
    group = None
    if world > 1:
        import datetime  # noqa: PLC0415

        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend,
            store=dist.FileStore(store, world),
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=timeout),
        )
        group = dist.group.WORLD
    if recipe["model.model_dir"]:
        model = checkpoint_model(str(recipe["model.model_dir"])).to(device)
    else:
        model = tiny_model(recipe).to(device)
    geo = Geometry.of(model.config)
    memory = _Memory(device)
    timer = _VisionTimer(model.model.visual, memory)
    cp = None
    if world > 1:
        if sharded:
            hf.enable(model, group, frame_sharding(recipe, True), timeout=timeout)
        cp = hf.context_parallel(model, group, timeout=timeout)
    opt = torch.optim.AdamW(
        model.parameters(), lr=float(recipe["train.lr"]), weight_decay=float(recipe["train.weight_decay"])
    )
    series: dict[str, list] = {
        "step_seconds": [],
        "vision_seconds": [],
        "losses": [],
        "visual_rows": [],
        "frames": [],
        "distinct_frames": [],
        "distinct_visual_rows": [],
    }
    for step in range(int(recipe["train.steps"])):
        batch = {k: v.to(device) for k, v in make_batch(recipe, step, geo).items()}
        memory.reset()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = _step_loss(model, cp, batch, geo.image_token_id)
        loss.backward()
        total = loss.detach().clone()
        if world > 1:
            for p in model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad, group=group)
            dist.all_reduce(total, group=group)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        series["step_seconds"].append(time.perf_counter() - start)
        series["vision_seconds"].append(timer.seconds())
        series["losses"].append(float(total))
        series["visual_rows"].append(int((batch["input_ids"] == geo.image_token_id).sum()))
        _count_frames(series, batch, geo)
        if progress and rank == 0:
            print(
                "  %-10s step %3d/%d  loss %.6f  step %.3f s  vision %.3f s"
                % (
                    "sharded" if sharded else "replicated",
                    step + 1,
                    int(recipe["train.steps"]),
                    float(total),
                    series["step_seconds"][-1],
                    series["vision_seconds"][-1],
                ),
                flush=True,
            )
    series.update(peak_bytes=memory.peak(), vision_peak_bytes=timer.rise, visual_row_bytes=_row_bytes(model))
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(series, f)
    if world > 1:
        dist.destroy_process_group()


def run_arm(recipe: dict, sharded: bool, progress: bool = True) -> list[dict]:
    """Spawns distributed.cp_size local rank processes for one arm; their series in rank order.
    A rank that fails or hangs (train.timeout_ms on every collective) fails the arm: the other
    ranks are killed and FrameshardError names the rank."""
    world = int(recipe["distributed.cp_size"])
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            ctx.Process(target=_rank_main, args=(r, world, os.path.join(tmp, "store"), tmp, recipe, sharded, progress))
            for r in range(world)
        ]
        for p in procs:
            p.start()
        per_step = 2 * float(recipe["train.timeout_ms"]) / 1000.0
        deadline = time.monotonic() + 60 + per_step * max(1, int(recipe["train.steps"]))
        for p in procs:
            p.join(max(1.0, deadline - time.monotonic()))
        failed = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode != 0]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        if failed:
            raise FrameshardError(
                "frameshard train: expected every rank of the %s arm to finish, got rank %d exit code %s"
                % ("sharded" if sharded else "replicated", failed[0][0], failed[0][1])
            )
        results = []
        for r in range(world):
            with open(os.path.join(tmp, "rank%d.json" % r)) as f:
                results.append(json.load(f))
        return results


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


def main(args: Any, overrides: list[tuple[str, str]]) -> int:
    """`python -m frameshard train|ab` (see __main__): prints progress, the table or --json."""
    recipe, ignored = resolve_recipe(
        args.config,
        overrides,
        **{
            "distributed.cp_size": args.cp,
            "train.steps": args.steps,
            "model.family": args.family,
            "model.model_dir": args.model_dir,
        },
    )
    if recipe["model.model_dir"]:
        # The checkpoint's family and sizes; the recipe's model sizes are unused.
        recipe["model.family"] = checkpoint_family(str(recipe["model.model_dir"]))
    if args.print_config:
        print(json.dumps(recipe, indent=1, sort_keys=True))
        return 0
    progress = not args.json
    say = (lambda *a: print(*a, flush=True)) if progress else (lambda *a: None)
    say(
        "frameshard %s: %s, CP %d, %d steps, preset %s (scale %d), %s"
        % (
            args.command,
            recipe["model.family"],
            recipe["distributed.cp_size"],
            recipe["train.steps"],
            recipe["data.preset"],
            recipe["data.scale"],
            "checkpoint %s" % recipe["model.model_dir"] if recipe["model.model_dir"] else "tiny random model",
        )
    )
    if ignored:
        say("ignored recipe keys (not used by the Python commands): %s" % ", ".join(sorted(ignored)))
    wanted = [False, True] if args.command == "ab" else [bool(recipe[FS + ".enabled"])]
    arms = {}
    for sharded in wanted:
        name = (
            "unsharded"
            if int(recipe["distributed.cp_size"]) == 1 and args.command == "train"
            else ("sharded" if sharded else "replicated")
        )
        say("arm %s:" % name)
        arms[name] = summarize(run_arm(recipe, sharded, progress), sharded, bool(recipe[FS + ".dedup"]))
    ratios = compare(arms["replicated"], arms["sharded"]) if len(arms) == 2 else None
    if args.command == "ab" and args.plot:
        write_plot(args.plot, arms, recipe)
        say("plot: %s" % args.plot)
    if args.json:
        print(json.dumps({**(ratios or {}), **arms, "family": recipe["model.family"], "recipe": recipe}, indent=1))
    else:
        print(table(arms, ratios))
    diff = ratios["loss_max_abs_diff"] if ratios is not None else 0.0
    if math.isnan(diff) or diff > 1e-5:  # as the C++ ab: the arms must agree (float32)
        print("error: the arms' losses differ by %.3g (> 1e-5)" % diff, file=sys.stderr, flush=True)
        return 1
    return 0
