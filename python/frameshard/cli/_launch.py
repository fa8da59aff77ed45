"""How `python -m frameshard train|ab` (frameshard.cli._ab) gets its dp x cp ranks: spawned here
(the default: dp * cp local processes over a FileStore, one set per arm) or started by a launcher
(torchrun, or anything that sets RANK and WORLD_SIZE with MASTER_ADDR/MASTER_PORT or LOCAL_RANK:
this process is one rank, the group comes from the environment, both arms run here one after
the other). Either way every rank's series reach rank 0 (all_gather_object), and every rank ends
with a barrier and destroy_process_group, so no Gloo work object outlives the interpreter
(torch's Gloo teardown then aborts the process: "terminate called without an active exception")."""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from .._C import FrameshardError
from .._shutdown import ended, exit_now, shut_down

FS = "distributed.multimodal.vision.frame_sharding"


def from_env() -> tuple[int, int] | None:
    """(rank, world size) when a launcher started this process as one rank, else None."""
    env = os.environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    if "LOCAL_RANK" not in env and not ("MASTER_ADDR" in env and "MASTER_PORT" in env):
        return None
    try:
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    except ValueError:
        raise FrameshardError(
            "frameshard train: RANK, WORLD_SIZE: expected integers, got %r, %r" % (env["RANK"], env["WORLD_SIZE"])
        ) from None


def check_world(command: str, recipe: dict, world: int) -> None:
    """A launcher's world must be the recipe's dp x cp ranks."""
    dp, cp = int(recipe["distributed.dp_size"]), int(recipe["distributed.cp_size"])
    if world != dp * cp:
        whole = "%d" % (world // dp) if world % dp == 0 else "%d / %d (not a whole number)" % (world, dp)
        raise FrameshardError(
            "frameshard %s: distributed.cp_size: expected WORLD_SIZE / dp = %s (WORLD_SIZE %d, dp %d), got %d"
            % (command, whole, world, dp, cp)
        )


def _device(rank: int) -> torch.device:
    if not torch.cuda.is_available():
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)  # NCCL's object collectives use the current device
    return device


def _mesh(recipe: dict, world: int, device: torch.device) -> Any:
    """The (dp, cp) DeviceMesh over the world, replica-major; None for dp 1 with mesh_dims [cp],
    whose CP group is the default group (the commands' setup before --dp)."""
    dp, cp = int(recipe["distributed.dp_size"]), int(recipe["distributed.cp_size"])
    if world == 1 or (dp == 1 and list(recipe[FS + ".mesh_dims"]) == ["cp"]):
        return None
    return init_device_mesh(device.type, (dp, cp), mesh_dim_names=("dp", "cp"))


def _finish(world: int, ok: bool) -> None:
    """The rank's clean exit (frameshard.shut_down): after an error the barrier is skipped, as a
    dead peer would hang it."""
    if world > 1:
        shut_down(peers_alive=ok)


def rank_job(rank: int, world: int, store: str | None, recipe: dict, arms: list[bool], progress: bool) -> list | None:
    """One rank: joins the group (a FileStore at `store`, or env:// when None), trains each arm
    of `arms` (sharded or not) with a fresh model, and returns on rank 0, per arm, every rank's
    series in rank order (None on the other ranks)."""
    from . import _train  # noqa: PLC0415  (imports transformers)

    torch.set_num_threads(1)
    device = _device(rank)
    timeout = datetime.timedelta(seconds=float(recipe["train.timeout_ms"]) / 1000.0)
    ok = False
    try:
        if world > 1:
            backend = "nccl" if device.type == "cuda" else "gloo"
            if store is None:
                dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world, timeout=timeout)
            else:
                files = dist.FileStore(store, world)
                dist.init_process_group(backend, store=files, rank=rank, world_size=world, timeout=timeout)
        mesh = _mesh(recipe, world, device)
        results = []
        for sharded in arms:
            series = _train.train_arm(rank, world, recipe, sharded, device, mesh, progress)
            gathered: list = [None] * world
            if world > 1:
                dist.all_gather_object(gathered, series)
            else:
                gathered = [series]
            results.append(gathered)
        ok = True
        return results if rank == 0 else None
    finally:
        _finish(world, ok)


def _spawned(rank: int, world: int, tmp: str, recipe: dict, sharded: bool, progress: bool) -> None:
    """A spawned rank process: rank 0 writes the arm's series of every rank to tmp/ranks.json."""
    got = rank_job(rank, world, os.path.join(tmp, "store"), recipe, [sharded], progress)
    if got is not None:
        with open(os.path.join(tmp, "ranks.json"), "w") as f:
            json.dump(got[0], f)
    if ended():
        # As a torchrun-launched rank ends (frameshard/__main__.py): the spawn child would
        # otherwise exit through sys.exit and finalize the interpreter, where torch's Gloo teardown
        # has aborted a rank under load (exit -6, "terminate called without an active exception";
        # CI, stop 56, the replicated arm of test_hf_ab four times in a row).
        exit_now(0)


def spawn_arm(recipe: dict, sharded: bool, progress: bool = True) -> list[dict]:
    """Spawns dp * cp local rank processes for one arm; their series in rank order. A rank that
    fails or hangs (train.timeout_ms on every collective) fails the arm: the other ranks are
    killed and FrameshardError names the rank."""
    world = int(recipe["distributed.dp_size"]) * int(recipe["distributed.cp_size"])
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=_spawned, args=(r, world, tmp, recipe, sharded, progress)) for r in range(world)]
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
        with open(os.path.join(tmp, "ranks.json")) as f:
            return json.load(f)
