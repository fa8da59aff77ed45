"""Vision calls that line up across processes whose batches differ.

A trainer runs its model in passes: a generation, log-prob passes without gradients (old or
reference log-probs), the loss's forward and backward. With frameshard every vision call of an
enabled module is a collective over all processes (a dp x cp mesh: each process brings its own
images, and each distinct image is encoded once somewhere), so the processes must make the same
calls in the same order, which batches of different content do not give: a process whose rows
hold no image makes no vision call, one with images and videos makes two. `Lockstep` lines them
up and turns what cannot line up into one error on every process instead of a hang:

    lockstep = Lockstep(group, device, "frameshard.integrations.trl")
    hf._patches.state(visual, "vision").calls = lockstep     # consulted by every vision call
    holder.register_forward_pre_hook(lockstep.join_hook, with_kwargs=True)  # holder.visual is it
    holder.register_forward_hook(lockstep.zero_hook, with_kwargs=True)
    with lockstep.vision_pass("loss", visual, 0, outer=ddp_model):
        ddp_model(**batch)                                     # one slot per forward

- A pass's slots are the forwards of the model the trainer calls (`outer`: the DDP or FSDP
  module, or the model; in a generation only its first forward, the prefill: decoding steps take
  no images). At the start of each slot -- a forward pre-hook that runs before DDP's buffer
  broadcast and FSDP's all-gathers -- every process contributes one small record to one
  all-gather on frameshard's own group: its pass (a sequence number, its name, which model), the
  vision calls its forward will make (0, 1, or 2 with images and videos), its grad mode, and a
  failure's text if it failed.
- Every process decides the same from the same records: each makes as many vision calls as the
  most any process makes, joining the calls it lacks (empty calls that encode its share of the
  others' frames) first thing in its forward, where the others' run, so that FSDP's per-block
  all-gathers keep one order; the joined outputs enter its hidden states as an exact zero, so
  that the backward reaches its tower too.
- At a pass's end every process contributes a record too. Processes that ran the model a
  different number of times in a pass (one starts a slot while another ends the pass), passes
  that differ (a process in the generation, another in the loss pass), a vision call outside any
  slot on one process only, or a process that failed (its exception's text travels in its
  record) raise the same FrameshardError on every process, before any collective of DDP or FSDP
  could leave them waiting.

A pass also carries the media keys the trainer knows: the vision calls take them in order,
checked against the grid rows the pass expected; a mismatch falls back to the pixel hash.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import inspect
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist

from .._C import FrameshardError
from .._plan import Plan
from ..hf import _vision

_LOG = logging.getLogger("frameshard")

_MAGIC = 0x46534C4B53543032  # "FSLKST02"
SLOT, CALL, END, FAILED = range(4)
_STATES = ("a forward of the model", "a vision call outside the model's forwards", "the pass's end", "a failure")
_MEDIA = ("pixel_values", "pixel_values_videos")  # each makes one vision call of the forward
_MESSAGE_WORDS = 32  # 256 bytes: the pass's name and a failure's text
_HEAD = 8


@dataclasses.dataclass
class Pass:
    """One pass of the trainer: `name` for messages, `seq` (the same on every process), its
    model's index and enabled vision module, and the media keys the trainer gave for its calls."""

    name: str
    seq: int
    model: int
    visual: torch.nn.Module
    keys: list[Any] | None = None
    grid: list[tuple[int, ...]] | None = None
    cursor: int = 0
    calls_left: int = 0  # vision calls the current slot still covers (own and joins)
    joins: int = 0  # joins the current slot owes (made first thing in the holder's forward)


@dataclasses.dataclass
class Counts:
    """What the vision calls encoded since the last `take_counts`: frame units and patch rows, all
    processes together, in total (each use) and distinct (what the towers saw)."""

    calls: int = 0
    frames: int = 0
    frames_distinct: int = 0
    rows: int = 0
    rows_distinct: int = 0

    def __iadd__(self, other: Counts) -> Counts:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def add(self, plan: Plan) -> None:
        self.calls += 1
        d = plan.dedup
        self.frames += d.units if d is not None else len(plan.units)
        self.frames_distinct += d.distinct_units if d is not None else len(plan.units)
        self.rows += d.patch_rows if d is not None else plan.total_patch_rows
        self.rows_distinct += d.distinct_patch_rows if d is not None else plan.total_patch_rows


class Lockstep:
    """See the module docstring. `group` is frameshard's own group over every process; `device`
    holds the exchanged records (CPU for Gloo, the process's GPU for NCCL); `fn` names the
    caller in errors."""

    def __init__(self, group: dist.ProcessGroup | None, device: torch.device, fn: str) -> None:
        self.group = group
        self.world = group.size() if group is not None else 1
        self.rank = group.rank() if group is not None else 0
        self.device = device
        self.fn = fn
        self.current: Pass | None = None
        self.seq = 0
        self.counts = Counts()
        self._zeros: list[torch.Tensor | None] = []  # each open holder forward's joined zero
        self._warned: set[str] = set()

    # ---------------------------------------------------------------- passes
    @contextlib.contextmanager
    def vision_pass(
        self,
        name: str,
        visual: torch.nn.Module,
        model: int,
        *,
        outer: torch.nn.Module | None = None,
        media: int | None = None,
        join_in_forward: bool = True,
        keys: Sequence[Any] | None = None,
        grid: Any = None,
    ) -> Iterator[Pass]:
        """One pass (see the module docstring). Its slots: every forward of `outer`, or, with
        `media` (the vision calls this process's pass makes: a generation's images and videos),
        one slot at its start, whose joins run at once or, with `join_in_forward`, in the first
        forward of the module that calls the vision module. `keys` and `grid`: the media keys of
        the pass's images, in the order its vision calls take them, and their grid rows (None:
        hash the pixels). A pass inside a pass is the same pass."""
        if self.current is not None:
            yield self.current
            return
        self.seq += 1
        p = Pass(name, self.seq, model, visual)
        if keys is not None and grid is not None:
            p.keys, p.grid = list(keys), [tuple(r) for r in torch.as_tensor(grid).tolist()]
        self.current = p
        self._zeros.clear()
        # Before the forward's own pre-hooks (FSDP2's all-gathers) and DDP's forward.
        handles = []
        if outer is not None:
            handles.append(outer.register_forward_pre_hook(self._slot_hook, with_kwargs=True, prepend=True))
        try:
            if media is not None:
                self._slot(p, media)
                while not join_in_forward and p.joins > 0:
                    p.joins -= 1
                    _vision.join(visual)
            yield p
            if self.world > 1:
                self._exchange(p, END, 0)
        except BaseException as e:
            if self.world > 1 and not getattr(e, "frameshard_agreed", False):
                self._announce(p, e)
            raise
        finally:
            for handle in handles:
                handle.remove()
            self.current = None
            self._zeros.clear()

    def _slot(self, p: Pass, own: int) -> None:
        most = own if self.world == 1 else self._exchange(p, SLOT, own)
        p.calls_left, p.joins = most, most - own

    def _slot_hook(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        if self.current is not None:
            self._slot(self.current, _media_calls(module, args, kwargs))

    # -------------------------------------- the forward that calls the vision module
    def join_hook(self, module: torch.nn.Module, _args: tuple, _kwargs: dict) -> None:
        """Pre-hook of the module that calls the vision module (`module.visual`, first thing in
        its forward): the joins its slot owes, before its own calls (where the others' run)."""
        p = self.current
        zero = None
        while p is not None and p.joins > 0:
            p.joins -= 1
            z = _vision.join(module.visual)
            zero = z if zero is None else zero + z
        self._zeros.append(zero)

    def zero_hook(self, _module: torch.nn.Module, _args: Any, _kwargs: Any, output: Any) -> Any:
        """Its post-hook: the joined outputs enter the hidden states as an exact zero, so that the
        backward reaches the tower on this process too (DDP and FSDP see its parameters used)."""
        zero = self._zeros.pop() if self._zeros else None
        if zero is None or not zero.requires_grad:
            return None
        if isinstance(output, tuple):
            return (output[0] + zero.to(output[0].dtype), *output[1:])
        output["last_hidden_state"] = output["last_hidden_state"] + zero.to(output["last_hidden_state"].dtype)
        return output

    # ------------------------------------------------ hf's CallHooks protocol
    def before(self, visual: torch.nn.Module, grid_thw: torch.Tensor) -> list[Any] | None:
        """Every vision call of an enabled module (its media keys): one its slot covers runs; another
        (outside the trainer's passes, or more than its forward announced) is a collective of its
        own, whose record meets the others'."""
        p = self.current
        keys = self._take_keys(p, grid_thw) if p is not None and grid_thw.shape[0] > 0 else None
        if p is not None and p.calls_left > 0:
            p.calls_left -= 1
        elif self.world > 1:
            self._exchange(p, CALL, 1)
        return keys

    def after(self, plan: Plan) -> None:
        self.counts.add(plan)

    def take_counts(self) -> Counts:
        """What the calls encoded since the last take."""
        counts, self.counts = self.counts, Counts()
        return counts

    def _take_keys(self, p: Pass, grid_thw: torch.Tensor) -> list[Any] | None:
        if p.keys is None:
            return None
        rows = [tuple(r) for r in grid_thw.tolist()]
        expected = p.grid[p.cursor : p.cursor + len(rows)]
        if rows != expected:
            if p.name not in self._warned:
                self._warned.add(p.name)
                _LOG.warning(
                    "%s: a vision call of the %s pass has grid rows %s where the trainer's batch has %s at "
                    "image %d: keying its frames by their pixels instead",
                    self.fn,
                    p.name,
                    rows[:4],
                    expected[:4],
                    p.cursor,
                )
            p.keys = None
            return None
        keys = p.keys[p.cursor : p.cursor + len(rows)]
        p.cursor += len(rows)
        return keys

    # -------------------------------------------------------------- exchange
    def _record(self, p: Pass | None, state: int, calls: int, error: str = "") -> torch.Tensor:
        name = (p.name if p is not None else "").encode("utf-8", "replace")[:64]
        text = (name + error.encode("utf-8", "replace"))[: 8 * _MESSAGE_WORDS]
        padded = text + b"\0" * (8 * _MESSAGE_WORDS - len(text))
        words = [
            _MAGIC,
            p.seq if p is not None else 0,
            p.model if p is not None else -1,
            state,
            int(torch.is_grad_enabled()),
            calls,
            len(name),
            len(text),
        ]
        words += [int.from_bytes(padded[8 * i : 8 * i + 8], "little", signed=True) for i in range(_MESSAGE_WORDS)]
        return torch.tensor(words, dtype=torch.int64, device=self.device)

    def _gather(self, record: torch.Tensor, timeout: float | None = None) -> list[list[int]]:
        out = [torch.empty_like(record) for _ in range(self.world)]
        work = dist.all_gather(out, record, group=self.group, async_op=True)
        work.wait(datetime.timedelta(seconds=timeout)) if timeout is not None else work.wait()
        return [t.cpu().tolist() for t in out]

    def _exchange(self, p: Pass | None, state: int, calls: int) -> int:
        """The records' agreed number of vision calls (see `decide`)."""
        return decide(self._gather(self._record(p, state, calls)), self.rank, self.world, self.fn)

    def _announce(self, p: Pass, error: BaseException) -> None:
        """This process failed inside `p`: its record meets the peers' next exchange, so that they
        raise too; bounded, as the peers may have left."""
        try:
            self._gather(self._record(p, FAILED, 0, "%s: %s" % (type(error).__name__, error)), timeout=60.0)
        except Exception:  # noqa: BLE001  (the original error is what this process raises)
            pass


def media_calls(kwargs: dict) -> int:
    """The vision calls a forward (or a generation) with these keyword arguments makes: one for
    images, one for videos."""
    return sum(kwargs.get(name) is not None for name in _MEDIA)


def _media_calls(module: torch.nn.Module, args: tuple, kwargs: dict) -> int:
    if args:
        try:
            kwargs = dict(inspect.signature(module.forward).bind_partial(*args, **kwargs).arguments)
        except TypeError:
            pass
    return media_calls(kwargs)


def _message(record: list[int]) -> tuple[str, str]:
    """(the pass's name, the failure's text) a record carries."""
    length = max(0, min(record[7], 8 * _MESSAGE_WORDS))
    raw = b"".join(w.to_bytes(8, "little", signed=True) for w in record[_HEAD : _HEAD + _MESSAGE_WORDS])[:length]
    split = max(0, min(record[6], length))
    return raw[:split].decode("utf-8", "replace"), raw[split:].decode("utf-8", "replace")


def _where(record: list[int]) -> str:
    if record[1] == 0:
        return "no pass (a vision call outside the trainer's passes)"
    return "%s pass #%d (model %d)" % (_message(record)[0], record[1], record[2])


def decide(records: list[list[int]], rank: int, world: int, fn: str) -> int:
    """The most vision calls any process's record announces (every process then makes that many),
    or the FrameshardError every process raises alike (the same records give the same text after
    the rank prefix)."""

    def fail(text: str) -> None:
        error = FrameshardError("%s: [rank %d/%d] %s" % (fn, rank, world, text))
        error.frameshard_agreed = True  # every process raises it: nothing to announce
        raise error

    for q, r in enumerate(records):
        if r[0] != _MAGIC:
            fail("expected every process in frameshard's vision calls, got rank %d in another collective" % q)
    failed = [q for q, r in enumerate(records) if r[3] == FAILED]
    if failed:
        q = failed[0]
        fail("rank %d failed in its %s: %s" % (q, _where(records[q]), _message(records[q])[1]))
    first = records[0]
    for q, r in enumerate(records[1:], start=1):
        if r[1:3] != first[1:3] or _message(r)[0] != _message(first)[0]:
            fail(
                "expected every process in the same pass of the trainer, got rank 0 in its %s and rank %d in its "
                "%s (the processes run different passes)" % (_where(first), q, _where(r))
            )
        if r[4] != first[4]:
            fail(
                "expected the same grad mode on every process, got rank 0 %s and rank %d %s"
                % ("with" if first[4] else "without", q, "with" if r[4] else "without")
            )
        if r[3] != first[3]:
            fail(
                "expected every process to run the model as often in its %s, got rank 0 at %s and rank %d at %s "
                "(every forward of the model is a collective vision slot: call it on every process, as often)"
                % (_where(first), _STATES[first[3]], q, _STATES[r[3]])
            )
    return max(r[5] for r in records)
