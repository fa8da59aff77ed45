"""`calibrate`: time the vision tower you train and write the cost model the planner reads.

`cost_alpha: auto` counts FLOPs; what a rank actually spends depends on the hardware, the
attention kernel and the dtype. `calibrate` times the real module on single frames of a sweep
of sizes (and on calls of several frames, which separate the per-call constant), fits
cost(p) = a p^2 + b p + c seconds with the C++ core's non-negative least squares
(frameshard/calibrate.h) and writes the calibration file that `cost_alpha` accepts:

    result = frameshard.calibrate(model.model.visual, out="cal.txt")   # on the GPU you train on
    cfg = frameshard.FrameShardingConfig(enabled=True, cost_alpha="cal.txt")

or from the shell, for a checkpoint's tower (config.json only: weights do not change the time)
or a random tower of a given size:

    python -m frameshard calibrate --model-dir DIR --out cal.txt [--device cuda] [--dtype bfloat16]
    python -m frameshard calibrate --family qwen3_vl --width 256 --depth 4 --out cal.txt

Not collective: run it on one rank (or on every rank and compare).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import _C

DEFAULT_SIZES = (64, 144, 256, 576, 1024, 2304, 4096)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The fit: cost(p) = a p^2 + b p + c seconds per frame, `per_call` seconds once per call;
    `samples` are (patch_rows, frames, seconds) as timed; `text` is the file's text."""

    a: float
    b: float
    c: float
    per_call: float
    max_relative_error: float
    rms_relative_error: float
    samples: list[tuple[int, int, float]]
    text: str
    path: str | None

    @property
    def cost_alpha(self) -> str:
        """The inline cost_alpha spec of this fit ("quadratic:a,b,c")."""
        return "quadratic:%r,%r,%r" % (self.a, self.b, self.c)


def frame_of(patch_rows: int, merge: int) -> tuple[int, int, int]:
    """One frame of `patch_rows` rows with merge-aligned sides, as square as possible
    (1024 -> (1, 32, 32)), as `frameshard calibrate` lays them out."""
    for h in range(int(math.isqrt(patch_rows)), merge - 1, -1):
        if h % merge == 0 and patch_rows % h == 0 and (patch_rows // h) % merge == 0:
            return (1, h, patch_rows // h)
    raise _C.FrameshardError(
        "frameshard.calibrate: sizes: expected patch rows h*w with h and w multiples of %d, got %d"
        % (merge, patch_rows)
    )


def sweep(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(patch_rows, frames) per timed call: every size alone, calls of 4 frames up to a quarter
    of the largest size, and 16 frames of the smallest (tools/calibrate_command.cpp's sweep)."""
    sizes = sorted(int(s) for s in sizes)
    calls = [(p, 1) for p in sizes]
    calls += [(p, 4) for p in sizes if p == sizes[0] or 4 * p <= sizes[-1]]
    calls.append((sizes[0], 16))
    return calls


# Readers of a module the caller passes as its tower: module -> (features, spatial merge size,
# run(pv, grid, cu) -> list of output tensors, the module that owns the parameters), or None when
# the module is not theirs. frameshard.hf registers one for transformers vision modules.
_MODULE_TOWERS: list[Callable[[Any], tuple[int, int, Callable[..., list], Any] | None]] = []


def register_module_tower(reader: Callable[[Any], tuple[int, int, Callable[..., list], Any] | None]) -> None:
    """Lets `calibrate` time modules that `reader` knows without features / spatial_merge_size."""
    _MODULE_TOWERS.append(reader)


def _module_tower(module: Any) -> tuple[int, int, Callable[..., list], Any] | None:
    for reader in _MODULE_TOWERS:
        found = reader(module)
        if found is not None:
            return found
    return None


def check_clock(clock: str, fn: str) -> None:
    """FrameshardError naming `fn` unless `clock` is auto, cpu, wall or cuda."""
    if clock not in ("auto", "cpu", "wall", "cuda"):
        raise _C.FrameshardError("frameshard.%s: clock: expected auto, cpu, wall or cuda, got %r" % (fn, clock))


def clock_timer(clock: str, device: torch.device) -> tuple[str, Callable[[], float]]:
    """The clock `clock` names on `device` ("auto": cuda on a CUDA device, else cpu) and its timer:
    process CPU time for "cpu", wall time otherwise (after a device synchronize: synchronize)."""
    use = ("cuda" if device.type == "cuda" else "cpu") if clock == "auto" else clock
    return use, (time.process_time if use == "cpu" else time.perf_counter)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def calibrate(
    tower: Any,
    out: str | None = None,
    *,
    sizes: Sequence[int] = DEFAULT_SIZES,
    repeats: int = 3,
    backward: bool = True,
    clock: str = "auto",
    features: int | None = None,
    spatial_merge_size: int | None = None,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> Calibration:
    """Times `tower` over a sweep of frame sizes and fits the cost model (module docstring).

    Args:
        tower: a transformers vision module (or a model holding one; wrappers are seen through),
            or any callable `tower(pixel_values, grid_thw, cu_seqlens)` returning a tensor or a
            list of tensors -- then `features` and `spatial_merge_size` are required.
        out: write the calibration file here (None: only return it).
        sizes: patch rows per frame to time (each h * w with merge-aligned sides).
        repeats: timed calls per sample (the median is kept), after one warm-up call.
        backward: time forward + backward (loss = sum of the outputs' means), as training does;
            False: forward only under no_grad.
        clock: "cpu" (process CPU time: ranks that share cores), "wall", "cuda" (wall after a
            device synchronize) or "auto" (cuda on a CUDA device, else cpu).
        device, dtype: of the random pixel rows (default: the module's first parameter's).
    """
    check_clock(clock, "calibrate")
    run, features, merge, param = _tower_call(tower, features, spatial_merge_size)
    device = (
        torch.device(device) if device is not None else (param.device if param is not None else torch.device("cpu"))
    )
    dtype = dtype if dtype is not None else (param.dtype if param is not None else torch.float32)
    use, timer = clock_timer(clock, device)
    timed = _timed_call(run, timer, device, backward)
    samples = _sweep_samples(timed, sizes, repeats, features, merge, device, dtype)
    fit = _C.fit_quadratic([(rows, seconds, frames) for rows, frames, seconds in samples])
    what = "%s, %s, %s on %s, clock %s, median of %d" % (
        type(tower).__name__,
        "forward + backward" if backward else "forward only",
        str(dtype).replace("torch.", ""),
        device,
        use,
        max(1, int(repeats)),
    )
    text = _C.calibration_text(fit["a"], fit["b"], fit["c"], _fit_report(what, samples, fit))
    if out is not None:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    return Calibration(
        a=fit["a"],
        b=fit["b"],
        c=fit["c"],
        per_call=fit["per_call"],
        max_relative_error=fit["max_relative_error"],
        rms_relative_error=fit["rms_relative_error"],
        samples=samples,
        text=text,
        path=out,
    )


def _tower_call(tower: Any, features: int | None, spatial_merge_size: int | None) -> tuple[Callable, int, int, Any]:
    """(run(pv, grid, cu) -> output tensors, features, merge size, a parameter or None) of
    `tower`: a transformers vision module (read from it), or a callable with `features` and
    `spatial_merge_size` given."""
    found = _module_tower(tower) if isinstance(tower, torch.nn.Module) and features is None else None
    if found is not None:
        features, merge, run, visual = found
        param = next(visual.parameters(), None)
    else:
        if features is None or spatial_merge_size is None:
            raise _C.FrameshardError(
                "frameshard.calibrate: expected features and spatial_merge_size for a callable "
                "tower, got features=%r, spatial_merge_size=%r" % (features, spatial_merge_size)
            )
        merge = int(spatial_merge_size)

        def run(pv: torch.Tensor, grid: torch.Tensor, cu: torch.Tensor) -> list[torch.Tensor]:
            o = tower(pv, grid, cu)
            return [o] if isinstance(o, torch.Tensor) else list(o)

        param = next(tower.parameters(), None) if isinstance(tower, torch.nn.Module) else None
    if spatial_merge_size is not None:
        merge = int(spatial_merge_size)
    return run, int(features), merge, param


def _timed_call(run: Callable, timer: Callable[[], float], device: torch.device, backward: bool) -> Callable:
    """timed(pv, grid, cu) -> seconds of one call of `run` (forward + backward of the outputs'
    means, or forward only under no_grad), the device synchronized on both sides."""

    def timed(pv: torch.Tensor, grid: torch.Tensor, cu: torch.Tensor) -> float:
        synchronize(device)
        start = timer()
        if backward:
            outs = run(pv, grid, cu)
            sum(o.float().mean() for o in outs).backward()
        else:
            with torch.no_grad():
                run(pv, grid, cu)
        synchronize(device)
        return timer() - start

    return timed


def _sweep_samples(
    timed: Callable, sizes: Sequence[int], repeats: int, features: int, merge: int, device: torch.device, dtype: Any
) -> list[tuple[int, int, float]]:
    """(patch rows per frame, frames, median seconds) over the sweep of `sizes`: random pixel
    rows, one warm-up call each."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    samples: list[tuple[int, int, float]] = []
    for rows, frames in sweep(sizes):
        t, h, w = frame_of(rows, merge)
        grid = torch.tensor([[frames * t, h, w]], dtype=torch.int64, device=device)
        pv = torch.randn(frames * rows, features, generator=gen).to(device=device, dtype=dtype)
        cu = torch.arange(0, frames * rows + 1, rows, dtype=torch.int32, device=device)
        timed(pv, grid, cu)  # warm-up
        times = sorted(timed(pv, grid, cu) for _ in range(max(1, int(repeats))))
        samples.append((rows, frames, times[len(times) // 2]))
    return samples


def _fit_report(what: str, samples: list[tuple[int, int, float]], fit: dict) -> str:
    """The calibration file's comment: what was timed, each sample against the fit, the errors."""
    lines = [
        "frameshard.calibrate (Python): " + what,
        "a call on k frames of p patch rows takes per_call + k * cost(p), cost(p) = a*p^2 + b*p + c seconds",
    ]
    for (rows, frames, seconds), err in zip(samples, fit["relative_errors"], strict=False):
        lines.append("  p %5d x %2d  measured %9.3f ms  fit %+6.1f%%" % (rows, frames, seconds * 1e3, err * 100))
    lines.append(
        "fit error: max %.1f%%, rms %.1f%%; per call %.3f ms"
        % (fit["max_relative_error"] * 100, fit["rms_relative_error"] * 100, fit["per_call"] * 1e3)
    )
    return "\n".join(lines)
