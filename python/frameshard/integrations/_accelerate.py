"""frameshard's process group and mesh from a trainer's accelerate `Accelerator`.

The trainers (TRL, transformers' Trainer) hold their processes in an accelerate Accelerator: its
processes are the data-parallel world (with a `ParallelismConfig`, its dp x cp mesh). frameshard's
vision calls run on a group of their own over the same processes, created here once (collective:
every process calls `mesh_of` in the same order, as `enable` does), so that they never interleave
with the gradient reductions of DDP or FSDP on the default group:

    mesh, device = mesh_of(trainer.accelerator, "frameshard.integrations.trl.enable")
    frameshard.hf.enable(model, mesh, config)   # mesh_dims ["dp", "cp"]

A one-process job has no torch.distributed group: it gets a one-rank Gloo group of its own (the
default group stays uninitialized), and dedup is then each process's own.
"""

from __future__ import annotations

import datetime
from typing import Any

import torch
import torch.distributed as dist

from .._C import FrameshardError
from .._groups import Mesh


def _one_rank_group() -> dist.ProcessGroup:
    """A one-rank Gloo group without torch.distributed's default group (ProcessGroup with a
    registered Gloo backend: private torch API, checked here)."""
    store = dist.HashStore()
    try:
        group = dist.ProcessGroup(store, 0, 1)
        backend = dist.ProcessGroupGloo(store, 0, 1, datetime.timedelta(minutes=30))
        group._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, backend)
        group._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    except (AttributeError, TypeError, RuntimeError) as e:
        raise FrameshardError(
            "frameshard.integrations: expected torch to build a one-rank Gloo group for a one-process job, "
            "got %s: %s (call torch.distributed.init_process_group first)" % (type(e).__name__, e)
        ) from e
    return group


def data_parallel_size(accelerator: Any, fn: str) -> int:
    """The processes that hold different batches: all of them, unless a ParallelismConfig splits
    them by tensor, context or sequence parallelism (not supported here: FrameshardError)."""
    config = getattr(accelerator, "parallelism_config", None)
    other = int(getattr(config, "non_data_parallel_size", 1) or 1) if config is not None else 1
    if other != 1:
        raise FrameshardError(
            "%s: expected a data-parallel job (ParallelismConfig tp_size, cp_size and sp_size 1), got %s"
            % (fn, "tp_size %s, cp_size %s, sp_size %s" % (config.tp_size, config.cp_size, config.sp_size))
        )
    return int(accelerator.num_processes)


def mesh_of(accelerator: Any, fn: str) -> tuple[Mesh, torch.device]:
    """(the dp x 1 Mesh on frameshard's own group over every process, the device of its
    exchanges). Collective where torch.distributed is initialized (dist.new_group)."""
    dp = data_parallel_size(accelerator, fn)
    initialized = dist.is_available() and dist.is_initialized()
    if dp > 1 and not initialized:
        raise FrameshardError(
            "%s: expected torch.distributed initialized for %d processes, got it uninitialized" % (fn, dp)
        )
    if not initialized:
        return Mesh(_one_rank_group(), 1, 1), torch.device("cpu")
    if dist.get_world_size() != dp:
        raise FrameshardError(
            "%s: expected the accelerator's %d processes to be torch.distributed's world, got a world of %d"
            % (fn, dp, dist.get_world_size())
        )
    group = dist.new_group(backend=dist.get_backend())
    backend = dist.get_backend(group)
    device = torch.device("cpu") if backend == "gloo" else torch.device(accelerator.device)
    return Mesh(group, dp, 1), device
