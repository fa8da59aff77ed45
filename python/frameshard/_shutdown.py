"""`shut_down`: how a process of a torch.distributed job ends (issue 38, docs/reliability.md).

try:
    train(...)
except BaseException:
    frameshard.shut_down(peers_alive=False)
    raise
frameshard.shut_down()

and, for a process that is only a rank (the command line's launched ranks, the test workers):

    frameshard._shutdown.exit_now(code)   # after shut_down: no interpreter finalization
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

import torch
import torch.distributed as dist

_ENDED = [False]  # shut_down destroyed this process's groups


def shut_down(peers_alive: bool = True) -> None:
    """End the job's distributed state before the interpreter exits; nothing when
    torch.distributed is not initialized. Call it last on every process.

    A Gloo work object (the last all-reduce's, say) can outlive the collective that waited on it:
    ProcessGroupGloo's worker thread drops its reference after waking the caller. If that is the
    last one while the interpreter finalizes, its destructor takes the GIL of a dying interpreter
    and the process aborts (`terminate called without an active exception`, torchrun exit -6).
    A barrier (Gloo's waits for all of this rank's earlier work too; with NCCL the device is
    synchronized first) leaves no collective in flight, and `destroy_process_group` releases every
    group (one nothing else holds is torn down at once, its worker threads joined; one an FSDP
    module still holds, when the module goes, with its threads idle). After an error
    (`peers_alive=False`) the peers may never reach a barrier, so only the groups are destroyed.
    """
    if not dist.is_available() or not dist.is_initialized():
        return
    try:
        if peers_alive:
            if torch.cuda.is_available() and dist.get_backend() == "nccl":
                torch.cuda.synchronize()
            dist.barrier()
    finally:
        dist.destroy_process_group()
        _ENDED[0] = True


def ended() -> bool:
    """True once shut_down has destroyed this process's groups."""
    return _ENDED[0]


def exit_now(code: int) -> NoReturn:
    """Ends the process with `code` without finalizing the interpreter: flushes logging, stdout and
    stderr, then os._exit. For a rank's process after shut_down (files it wrote are closed by
    then). Why: even with no collective in flight and every group destroyed, torch's teardown at
    finalization has still aborted a rank now and then (`terminate called without an active
    exception`: a group an object still held, freed by the finalizer with its threads; seen in CI
    under load, docs/reliability.md). The rank's work is done and its results written, so the
    finalizer has nothing left to do that os._exit would lose."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken pipe: nothing more to flush
            pass
    os._exit(code)
