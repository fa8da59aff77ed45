"""Shared fixtures of the Python suites."""

import pytest
import torch.distributed as dist


@pytest.fixture(scope="session")
def solo_group():
    """A one-rank Gloo group in this process: what `hf.enable` needs to accept where a test only
    patches a model and runs no collective."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.group.WORLD
