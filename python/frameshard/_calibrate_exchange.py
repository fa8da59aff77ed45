"""`calibrate_exchange`: measure the fixed latency of split frames' key/value exchange.

A split plan (`split_frames`) adds one synchronising exchange per full-attention layer on every
rank, whatever its rows. The planner charges it as `split_exchange_latency_us` per layer (forward
and backward together) and cuts a frame only when the modelled gain still exceeds
`split_min_gain` after paying it. The default (50 us) is a guess for NCCL inside one node; this
measures the group you train on, with the clock your cost calibration used:

    us = frameshard.calibrate_exchange(group)             # collective: every rank calls it
    cfg = frameshard.FrameShardingConfig(enabled=True, split_frames=True, cost_alpha="cal.txt",
                                         split_exchange_latency_us=us)

How: `shard_vision` runs a probe tower on one small frame cut over every rank, once with `layers`
exchanges a call and once with 2 * `layers`, forward + backward, alternating; the difference of
the fastest calls, divided by `layers`, is one exchange's latency, free of the call's own costs
(a difference lost in noise is measured again with more exchanges). Every rank returns
the same figure (the largest rank's), so every rank plans with it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.distributed as dist

from . import _C
from ._C import FrameshardError
from ._calibrate import check_clock, clock_timer, synchronize
from ._config import FrameShardingConfig
from ._groups import Timeout, millis, resolve
from ._shard import TowerGeometry, shard_vision

_log = logging.getLogger(__name__)
_MERGE = 2
_FEATURES = 16


class _ExchangeProbe(torch.nn.Module):
    """A tower whose only work is `layers` exchanges of its (small) rows."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(_FEATURES, width)
        self.layers = 1

    def forward(self, pixel_values, grid_thw, cu_seqlens, *, pieces, exchange):  # noqa: ANN001
        x = self.proj(pixel_values)
        for _ in range(self.layers):
            outs = exchange(x) if exchange is not None else [x]
            x = outs[0] + sum(o.mean(0) for o in outs[1:]) if len(outs) > 1 else outs[0]
        return x.reshape(-1, _MERGE * _MERGE * x.shape[1])


def _probe_config() -> FrameShardingConfig:
    # Cut the one frame over every rank, whatever it costs: the probe measures, it does not plan.
    return FrameShardingConfig(
        enabled=True,
        min_tokens=0,
        min_frames=0,
        min_local_patch_rows=0,
        split_frames=True,
        split_exchange_cost=0,
        split_min_gain=0.0,
        split_exchange_latency_us=0.0,
    )


_CLOCKS = ("auto", "cpu", "wall", "cuda")


def calibrate_exchange(
    group: Any = None,
    *,
    layers: int = 8,
    repeats: int = 5,
    width: int = 64,
    clock: str = "auto",
    device: torch.device | None = None,
    timeout: Timeout = None,
) -> float:
    """Microseconds of one split-frame key/value exchange, forward + backward, on `group`.

    Collective over `group` (a ProcessGroup, a DeviceMesh -- its "cp" dimension or its only one --
    or None: the default group); every rank returns the same value, the largest rank's. The ranks
    first agree on the arguments: a rank passing others makes every rank raise the same
    FrameshardError at once. A group of one rank has no exchange: 0.0.

    Args:
        layers: exchanges per probe call (the second call runs twice as many).
        repeats: timed calls of each kind (the fastest is kept), after one warm-up of each.
        width: features of a row the probe exchanges (a latency probe: keep it small).
        clock: "cpu" (process CPU time, as `calibrate` uses when ranks share cores), "wall",
            "cuda" (wall after a device synchronize) or "auto" (cuda on a CUDA device, else cpu).
            Use the clock of the cost calibration the latency is weighed against.
        device: of the probe's rows (default: the current CUDA device for an NCCL group, else
            the CPU).
    """
    check_clock(clock, "calibrate_exchange")
    if int(layers) < 1 or int(repeats) < 1:
        raise FrameshardError(
            "frameshard.calibrate_exchange: expected layers >= 1 and repeats >= 1, got %r and %r" % (layers, repeats)
        )
    pg, _ = resolve(group, "calibrate_exchange")
    if pg.size() < 2:
        return 0.0
    # One small exchange of the arguments, so that a rank called differently raises at once on
    # every rank instead of waiting out the group's timeout in a mismatched collective.
    _C.agree(
        "calibrate_exchange",
        ["layers", "repeats", "width", "clock"],
        [int(layers), int(repeats), int(width), _CLOCKS.index(clock)],
        pg,
        millis(timeout),
    )
    if device is None:
        nccl = dist.get_backend(pg) == "nccl"
        device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    device = torch.device(device)
    timed = _probe_timer(pg, int(width), clock, device, timeout)
    return _per_exchange_us(timed, int(layers), int(repeats), pg, device)


def _probe_timer(pg: Any, width: int, clock: str, device: torch.device, timeout: Timeout) -> Any:
    """timed(n) -> seconds of one probe call with n exchanges, forward + backward, on `pg`."""
    _, timer = clock_timer(clock, device)
    world = pg.size()
    probe = _ExchangeProbe(width).to(device)
    rows = _MERGE * _MERGE * 4 * world  # a frame of 2*world x 8 patches: 4 merged tokens a rank
    grid = [[1, 2 * world, 8]]
    pixels = torch.randn(rows, _FEATURES, generator=torch.Generator().manual_seed(0)).to(device)
    config = _probe_config()

    def timed(n: int) -> float:
        probe.layers = n
        dist.barrier(group=pg)
        synchronize(device)
        start = timer()
        out = shard_vision(probe, pixels, grid, pg, config, geometry=TowerGeometry(_MERGE), timeout=timeout)
        out.float().square().mean().backward()
        synchronize(device)
        return timer() - start

    return timed


def _per_exchange_us(timed: Any, layers: int, repeats: int, pg: Any, device: torch.device) -> float:
    """Microseconds an exchange adds: (the 2n-exchange call - the n-exchange call) / n, the
    largest over the ranks."""

    def lowest(n: int) -> tuple[float, float]:
        # The calls of n and 2n exchanges alternate, so that a load change on a shared machine
        # weighs on both alike, and the minimum of each is kept: noise only ever adds time.
        timed(n), timed(2 * n)  # warm-up
        ones, twos = [], []
        for _ in range(repeats):
            ones.append(timed(n))
            twos.append(timed(2 * n))
        return min(ones), min(twos)

    # A difference drowned in noise (the 2n calls not slower than the n calls on every rank) is
    # measured again with twice the exchanges a call, up to three times, before it is reported
    # as 0. The decision is taken on the all-reduced value, so every rank retries alike.
    for attempt in range(3):
        n = layers * 2**attempt
        one, two = lowest(n)
        per_exchange = max(0.0, (two - one) / n) * 1e6
        value = torch.tensor([per_exchange], dtype=torch.float64, device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=pg)
        if float(value.item()) > 0.0:
            return float(value.item())
    _log.warning("frameshard.calibrate_exchange: the exchange's time was lost in the timing noise; returning 0")
    return 0.0
