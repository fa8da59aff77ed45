"""cost_alpha="online": the plan's cost model learns from the run's own tower times.

One `_C.OnlineCost` per sharded caller (a tower's code, an enabled vision module) and group
(include/frameshard/online_cost.h has the fit and the rules that switch it). Each call:

1. every rank shares the previous call's sample -- its workload (sum p^2, sum p, frames, calls,
   split, K/V rows received; a piece of a split frame counted as the planner costs it) and its
   tower's forward plus backward seconds -- in one all-gather of `_C.OnlineCost.SAMPLE_SIZE` (8)
   float64 per rank over the call's group (frameshard's own, with its timeout: a dead peer is
   an error);
2. every rank records the same numbers in the same order and refits in float64, so the model in
   force, and the plan it makes, are bitwise identical on every rank (encode's consensus checks
   the plan);
3. encode plans with the model in force (ShardCall.online); the tower is timed: the forward
   around the call, the backward from its outputs' gradient to the last of its parameters'
   (a multi-grad hook). The clock: wall time after a device synchronise on CUDA, the process
   CPU clock on a CPU.

A call without a backward (no_grad, eval) while the caller trains contributes no sample (its
time is the forward alone); the first call decides whether the caller trains.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from . import _C
from ._config import FrameShardingConfig

_LOG = logging.getLogger("frameshard")

ONLINE = "online"


@dataclasses.dataclass(frozen=True)
class OnlineCostState:
    """What a caller's online cost model learned (frameshard.online_costs()).

    Attributes:
        fit: the model in force ("online: a=... s (rms ..)", or the FLOP model while warming up).
        fitted: whether a fit (in seconds) is in force.
        why: what the last update decided and why.
        calls: calls recorded; switches: times the model in force changed.
        predicted_slowest_seconds, measured_slowest_seconds: the last recorded call's slowest
            rank (tower forward + backward), as the model then in force predicted it and as the
            ranks measured it.
        rank_patch_rows: the patch rows each rank's tower ran in the last call (its plan).
    """

    fit: str
    fitted: bool
    why: str
    calls: int
    switches: int
    predicted_slowest_seconds: float
    measured_slowest_seconds: float
    rank_patch_rows: list[int]


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return time.perf_counter()
    return time.process_time()


class Online:
    """One caller's model, its last call's plan, and the timing of that call's tower."""

    def __init__(self, cost: Any, what: str) -> None:
        self.cost, self.what = cost, what
        self.trains: bool | None = None  # the first timed call decides
        self.plan: dict | None = None  # the last call's plan dict, its rank, its device
        self.rank, self.device = 0, torch.device("cpu")
        self.grid: torch.Tensor = torch.zeros((0, 3), dtype=torch.int64)
        self.forward, self.call_trains = 0.0, False
        self.backward: list[float] = []  # [start, end] once seen
        self.handles: list[Any] = []
        self.predicted, self.measured = 0.0, 0.0
        self.rank_patch_rows: list[int] = []  # the last finished call's plan

    def pending(self) -> list[float]:
        """This rank's sample of the last call (seconds 0: none to share), hooks removed."""
        for h in self.handles:
            h.remove()
        self.handles = []
        if self.plan is None:
            return [0.0] * _C.OnlineCost.SAMPLE_SIZE
        seconds = self.forward
        if self.call_trains:
            seconds = seconds + self.backward[1] - self.backward[0] if len(self.backward) == 2 else 0.0
        if self.trains is None:
            self.trains = self.call_trains
        if self.call_trains != self.trains:
            seconds = 0.0
        return (
            list(self.cost.sample(self.plan, self.rank, seconds)) if seconds > 0 else [0.0] * _C.OnlineCost.SAMPLE_SIZE
        )

    def time_tower(self, run: Callable[[], list[torch.Tensor]], tower: object, device: torch.device) -> list:
        """run() timed; hooks that time its backward (when its outputs need gradients)."""
        self.device = device
        start = _clock(device)
        out = run()
        self.forward = _clock(device) - start
        self.backward = []
        params = _trainable_parameters(tower)
        grads = [t for t in out if isinstance(t, torch.Tensor) and t.requires_grad]
        self.call_trains = bool(params) and bool(grads)
        if self.call_trains:

            def started(grad: torch.Tensor) -> None:
                if not self.backward:
                    self.backward.append(_clock(device))

            def ended(_grads: Sequence[Any]) -> None:
                if len(self.backward) == 1:
                    self.backward.append(_clock(device))

            self.handles = [t.register_hook(started) for t in grads]
            self.handles.append(torch.autograd.graph.register_multi_grad_hook(params, ended, mode="all"))
        return out


def _trainable_parameters(tower: object) -> list[torch.Tensor]:
    module = tower if isinstance(tower, torch.nn.Module) else getattr(tower, "module", None)
    if not isinstance(module, torch.nn.Module):
        return []
    return [p for p in module.parameters() if p.requires_grad]


_STATES: dict[tuple, Online] = {}
# Per caller key: what else remembers the caller (shard_vision's last path), dropped with it.
FORGET: list[Callable[[int], None]] = []
_OWNED: set[int] = set()  # the keys whose owner has a finalizer


def caller_key(owner: object) -> int:
    """The key of a caller (a vision module, a tower, a tower's code): its id, for as long as it
    lives. When it is collected, its learners and memos go with it: CPython reuses ids, and a
    new module at the old one's address must start afresh, not from another tower's fit."""
    key = id(owner)
    if key not in _OWNED:
        try:
            weakref.finalize(owner, _forget, key)
        except TypeError:  # not weakly referenceable: kept for the process's life
            return key
        _OWNED.add(key)
    return key


def _forget(key: int) -> None:
    _OWNED.discard(key)
    for k in [k for k in _STATES if k[0] == key]:
        del _STATES[k]
    for forget in FORGET:
        forget(key)


def prepare(
    key: Any,
    what: str,
    pg: dist.ProcessGroup,
    options: Any,
    config: FrameShardingConfig,
    pixel_values: torch.Tensor,
) -> Online | None:
    """Before a call with cost_alpha online: shares and learns from the last call's samples (one
    all-gather over `pg`); the caller plans with the returned state's `cost` (ShardCall.online).
    None for any other cost_alpha. Collective."""
    if config.cost_alpha != ONLINE:
        return None
    world = options.cp_size * options.dp
    state = _STATES.get((key, id(pg), world))
    if state is None:
        cost = _C.OnlineCost(
            options.overrides,
            world,
            options.spatial_merge_size,
            options.temporal_patch_size,
            options.tower_dims,
        )
        state = _STATES[(key, id(pg), world)] = Online(cost, what)
    mine = torch.tensor([state.pending()], dtype=torch.float64, device=_share_device(pg, pixel_values))
    # Consumed: a call that then fails (no finish) leaves no sample to share twice.
    last, state.plan = state.plan, None
    gathered = _C.all_gather_rows(mine, [1] * pg.size(), pg, options.timeout_ms)
    samples = gathered.cpu().flatten().tolist()
    size = _C.OnlineCost.SAMPLE_SIZE
    seconds = samples[size - 1 :: size]
    if any(seconds):  # every rank alike: the same samples decide
        state.measured = max(seconds)
        state.predicted = state.cost.predict_slowest(last) if last is not None else 0.0
        switched = state.cost.learn(samples, state.grid)
        log = _LOG.info if switched else _LOG.debug
        log(
            "%s: online cost, call %d: slowest rank %.4g s predicted, %.4g s measured; %s; in force: %s",
            what,
            state.cost.calls,
            state.predicted,
            state.measured,
            state.cost.why,
            state.cost.in_force["describe"],
        )
    return state


def finish(state: Online, plan: dict, pg: dist.ProcessGroup, on_mesh: bool) -> None:
    """After the call: keeps its plan (and the grid every rank planned, to weigh the next fit)."""
    state.plan = plan
    state.rank_patch_rows = [int(r["local_patch_rows"]) for r in plan["ranks"]]
    ranks = len(plan["ranks"])
    state.rank = pg.rank() if ranks == pg.size() else pg.rank() % max(1, ranks)
    # A mesh step that fell back to each replica's CP plan planned different batches per
    # replica: no shared batch to weigh a fit against (only its error can switch it).
    shared = not on_mesh or ranks == pg.size()
    state.grid = torch.tensor(plan["grid"] if shared else [], dtype=torch.int64).reshape(-1, 3)


def _share_device(pg: dist.ProcessGroup, pixel_values: torch.Tensor) -> torch.device:
    backend = str(dist.get_backend(pg)) if dist.is_initialized() else "gloo"
    if "nccl" in backend and pixel_values.is_cuda:
        return pixel_values.device
    return torch.device("cpu")


def online_costs() -> dict[str, OnlineCostState]:
    """What every live cost_alpha="online" caller of this process learned, by caller
    ("shard_vision", "hf.enable(Qwen3VLVisionModel)", ...; a second one of a name gets " #2").
    A caller's learner goes when its tower (or vision module) is collected."""
    out: dict[str, OnlineCostState] = {}
    for state in _STATES.values():
        name = state.what
        n = 2
        while name in out:
            name, n = "%s #%d" % (state.what, n), n + 1
        fit = state.cost.in_force
        out[name] = OnlineCostState(
            fit=fit["describe"],
            fitted=bool(fit["fitted"]),
            why=state.cost.why,
            calls=int(state.cost.calls),
            switches=int(state.cost.switches),
            predicted_slowest_seconds=state.predicted,
            measured_slowest_seconds=state.measured,
            rank_patch_rows=list(state.rank_patch_rows),
        )
    return out


def write_online_cost(path: str | os.PathLike, caller: str | None = None) -> str:
    """Writes the fit in force of `caller` (a key of online_costs(); None: the only one) as a
    `frameshard calibrate` file, to start the next run with cost_alpha=path. Returns the text.
    Raises FrameshardError when there is no such caller or no fit in force yet."""
    states = {}
    for state in _STATES.values():
        states.setdefault(state.what, state)
    if caller is None and len(states) != 1:
        raise _C.FrameshardError(
            "frameshard.write_online_cost: expected exactly one cost_alpha='online' caller or a "
            "caller name, got %d callers (%s)" % (len(states), ", ".join(sorted(states)) or "none")
        )
    name = caller if caller is not None else next(iter(states))
    if name not in states:
        raise _C.FrameshardError(
            "frameshard.write_online_cost: caller: expected one of %s, got %r" % (sorted(states), name)
        )
    text = states[name].cost.calibration_text("online fit of %s" % name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text
