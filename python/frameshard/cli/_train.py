"""One rank of one arm of `python -m frameshard train|ab` (frameshard.cli._ab): builds the model,
trains train.steps steps of its DP replica's batches and measures them. The process group is set
up by cli/_launch.py (spawned ranks or a launcher's)."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.distributed as dist

from .. import hf
from .._shard import frame_keys
from ..hf import _cp_owner
from . import _models
from ._batch import Geometry, make_batch


class _Memory:
    """Peak memory of a rank. CUDA: the caching allocator's allocated tensor bytes
    (max_memory_allocated, reset per step; the vision peak is the rise of max allocated during
    the vision forward). CPU -- torch has no allocated-bytes counter there --: the rank
    process's resident set size: `peak_bytes` its high-water mark (VmHWM, reset when the arm
    starts: under a launcher both arms run in the same processes), which includes the
    interpreter, torch and transformers and memory glibc has not returned, so it dilutes ratios
    towards 1; `vision_peak_bytes` the rise of the current RSS (/proc/self/statm) across the
    vision forward (large tensors are mmapped and unmapped by glibc, so the rise follows them
    closely)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        if not self.cuda:
            try:  # "5" resets the process's RSS high-water mark (Linux >= 4.0)
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                pass  # then the peak is the process's since it started

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
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        import resource  # noqa: PLC0415  (only where /proc has no VmHWM)

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
        if "f0" not in m:
            return 0.0  # a step whose replica had no media (no vision call)
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
    grid = batch["image_grid_thw"].reshape(-1, 3)
    first: dict = {}
    for i, key in enumerate(frame_keys(batch["pixel_values"], grid)):
        first.setdefault(key, i)
    tokens = (grid.prod(-1) // geo.merge**2).tolist()
    series["frames"].append(len(tokens))
    series["distinct_frames"].append(len(first))
    series["distinct_visual_rows"].append(sum(tokens[i] for i in first.values()))


def _parallelize(model: Any, recipe: dict, sharded: bool, mesh: Any, timeout: float) -> Any:
    """Frame-shards the tower (the sharded arm) and puts the language model under CP; returns
    the CP handle (None at cp 1). `mesh`: the (dp, cp) DeviceMesh, or None for dp 1 with
    mesh_dims [cp], where the default group is the CP group (as before --dp existed)."""
    cp, dims = int(recipe["distributed.cp_size"]), list(recipe[_models.FS + ".mesh_dims"])
    group = mesh if mesh is not None else dist.group.WORLD
    # A CP group of one rank has nothing to shard over, unless the frames pool over the mesh.
    if sharded and (cp > 1 or dims == ["dp", "cp"]):
        hf.enable(model, group, _models.frame_sharding(recipe, True), timeout=timeout)
    return hf.context_parallel(model, group, timeout=timeout) if cp > 1 else None


def _new_series() -> dict[str, list]:
    names = ("step_seconds", "vision_seconds", "losses", "visual_rows", "frames", "distinct_frames")
    return {k: [] for k in (*names, "distinct_visual_rows")}


def _say_step(sharded: bool, step: int, recipe: dict, series: dict) -> None:
    print(
        "  %-10s step %3d/%d  loss %.6f  step %.3f s  vision %.3f s"
        % (
            "sharded" if sharded else "replicated",
            step + 1,
            int(recipe["train.steps"]),
            series["losses"][-1],
            series["step_seconds"][-1],
            series["vision_seconds"][-1],
        ),
        flush=True,
    )


def train_arm(
    rank: int, world: int, recipe: dict, sharded: bool, device: torch.device, mesh: Any, progress: bool
) -> dict:
    """This rank's series of one arm: a fresh model (train.seed, so every rank and both arms start
    from the same weights), trained on its replica's batches. Gradients and the reported loss:
    SUM over all dp x cp ranks, divided by dp (each rank's loss is its share of its replica's
    mean; see docs/python-cp.md "Gradients"), so the loss is the mean over replicas."""
    timeout = float(recipe["train.timeout_ms"]) / 1000.0
    dp, cp = int(recipe["distributed.dp_size"]), int(recipe["distributed.cp_size"])
    model = _models.checkpoint_model(str(recipe["model.model_dir"])) if recipe["model.model_dir"] else None
    model = (model if model is not None else _models.tiny_model(recipe)).to(device)
    geo, memory = Geometry.of(model.config), _Memory(device)
    timer = _VisionTimer(model.model.visual, memory)
    cp_handle = _parallelize(model, recipe, sharded, mesh, timeout) if world > 1 else None
    pooled = sharded and list(recipe[_models.FS + ".mesh_dims"]) == ["dp", "cp"] and world > 1
    opt = torch.optim.AdamW(
        model.parameters(), lr=float(recipe["train.lr"]), weight_decay=float(recipe["train.weight_decay"])
    )
    series = _new_series()
    owner = sharded and cp_handle is not None and recipe[_models.FS + ".gather"] == "owner"
    if owner:
        series["routed_rows"] = []
    for step in range(int(recipe["train.steps"])):
        batch = {k: v.to(device) for k, v in make_batch(recipe, step, geo, rank // cp).items()}
        memory.reset()
        timer.marks.clear()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = _step_loss(model, cp_handle, batch, geo.image_token_id)
        if pooled and not bool((batch["input_ids"] == geo.image_token_id).any()):
            # transformers skips the tower on a text-only batch; the other replicas' frames
            # still need this rank's share of the mesh's collectives, forward and backward.
            loss = loss + hf.join_without_media(model)
        loss.backward()
        total = loss.detach().clone()
        if world > 1:
            for p in model.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad.div_(dp)
            dist.all_reduce(total)
            total.div_(dp)
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        series["step_seconds"].append(time.perf_counter() - start)
        series["vision_seconds"].append(timer.seconds())
        series["losses"].append(float(total))
        series["visual_rows"].append(int((batch["input_ids"] == geo.image_token_id).sum()))
        _count_frames(series, batch, geo)
        if owner:  # the visual rows the owner-routed gather gave this rank (its tokens' rows)
            stats = _cp_owner.last_stats(model)
            series["routed_rows"].append(stats.visual_rows if stats is not None else 0)
        if progress and rank == 0:
            _say_step(sharded, step, recipe, series)
    series.update(peak_bytes=memory.peak(), vision_peak_bytes=timer.rise, visual_row_bytes=_row_bytes(model))
    return series
