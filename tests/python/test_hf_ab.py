"""`python -m frameshard ab` and `train` (frameshard.cli._ab) on a tiny random transformers model.

One `ab` run at CP 2 (2 steps, the mixed preset at scale 12, so it stays short): the JSON keys of
the C++ command, the arms' losses within 1e-5 (float32; measured 0 and 4.8e-7), and one
`train --cp 1` run, the unsharded single process, whose losses equal the CP 2 arms' within 1e-5
(the order of float32 sums differs: measured 4.8e-7; it has 4 query heads on 2 K/V heads, so this
checks the CP attention's grouped-query order too). Also the resolved recipe (a dotted override, a
C++ recipe file) and the error for an unknown key.

Launch modes and DP: `train` at CP 2 under torchrun (one rank per process, rank 0 prints) with
gather owner gives the spawned run's losses (the `ab` run's sharded arm: the same arm with the
all-gather, spawned), its ranks receive at most 0.6 of the visual rows' bytes, and it ends without
torch's Gloo teardown abort; `train --json` has the C++ `frameshard train --json` shape (the arm's keys at
the top level); `--dp 2` (CP 1, so it stays short) with mesh_dims [dp, cp] (the frames pooled over
both replicas' ranks; `ab` under torchrun, both arms in the same processes) gives the losses of
mesh_dims [cp] (each replica encodes its own; spawned) and of the replicated arm within 1e-5, and
the replicas draw their own batches.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

FAST = ["--data.scale", "12", "--steps", "2"]
ARM_KEYS = {
    "losses",
    "mean_vision_seconds",
    "mean_step_seconds",
    "step_seconds",
    "vision_seconds",
    "cp",
    "max_peak_bytes",
    "max_vision_peak_bytes",
    "peak_bytes_per_rank",
    "visual_bytes_received",
}
RATIOS = {
    "vision_time_ratio",
    "step_time_ratio",
    "peak_bytes_ratio",
    "vision_peak_bytes_ratio",
    "loss_max_abs_diff",
    "visual_bytes_ratio",
}


# torchrun: torch.distributed.run of the tests' interpreter, 2 processes, each one rank.
TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
MESH_DIMS = "--distributed.multimodal.vision.frame_sharding.mesh_dims"
# The keys of the C++ `frameshard train --json` that the Python `train --json` has too, at the top level.
CPP_TRAIN_KEYS = ARM_KEYS | {
    "name",
    "dedup",
    "measured_steps",
    "vision_seconds_per_rank",
    "frames_total",
    "frames_distinct",
    "rows_total",
    "rows_distinct",
}


def frameshard(*args, check=True, env=None, launcher=()):
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    cmd = [sys.executable, *launcher, "-m", "frameshard", *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


@pytest.fixture(scope="module")
def plot(tmp_path_factory):
    return str(tmp_path_factory.mktemp("ab") / "ab.svg")


@pytest.fixture(scope="module")
def ab(plot):
    return json.loads(frameshard("ab", "--family", "qwen2_vl", "--cp", "2", "--json", "--plot", plot, *FAST).stdout)


def test_ab_plot_is_the_cpp_commands_svg(ab, plot):
    with open(plot, encoding="utf-8") as f:
        svg = f.read()
    assert svg.startswith("<?xml") and "</svg>" in svg, svg[:200]
    assert "replicated" in svg and "sharded" in svg and "qwen2_vl" in svg


def test_ab_json(ab):
    assert RATIOS <= set(ab), sorted(ab)
    for arm in ("replicated", "sharded"):
        assert ARM_KEYS <= set(ab[arm]), sorted(ab[arm])
        assert len(ab[arm]["losses"]) == 2 and ab[arm]["cp"] == 2
    assert ab["loss_max_abs_diff"] <= 1e-5, ab["loss_max_abs_diff"]
    assert all(ab[k] > 0 for k in RATIOS - {"loss_max_abs_diff"}), {k: ab[k] for k in RATIOS}
    print("ab qwen2_vl cp 2:", {k: ab[k] for k in sorted(RATIOS)})


@pytest.fixture(scope="module")
def one():
    return json.loads(frameshard("train", "--family", "qwen2_vl", "--cp", "1", "--json", *FAST).stdout)


def test_cp2_equals_one_process(ab, one):
    losses = one["losses"]
    for arm in ("replicated", "sharded"):
        diff = max(abs(a - b) for a, b in zip(losses, ab[arm]["losses"], strict=False))
        assert diff <= 1e-5, (arm, losses, ab[arm]["losses"])


@pytest.fixture(scope="module")
def launched():
    # gather owner: each rank embeds its chunks and receives only their visual rows (hf/_cp_owner)
    owner = ["--distributed.multimodal.vision.frame_sharding.gather", "owner"]
    return frameshard("train", "--family", "qwen2_vl", "--cp", "2", "--json", *FAST, *owner, launcher=TORCHRUN)


def test_torchrun_train_equals_spawned(ab, launched):
    """torchrun with gather owner gives the spawned all-gather arm's losses, and each rank
    received at most 0.6 of the visual rows (about 1/CP: measured 0.53 over the two steps)."""
    got = json.loads(launched.stdout)  # one object: only rank 0 prints
    diff = max(abs(a - b) for a, b in zip(got["losses"], ab["sharded"]["losses"], strict=True))
    assert diff <= 1e-5, (got["losses"], ab["sharded"]["losses"])
    assert got["cp"] == 2 and got["arm"] == "sharded", got
    assert "terminate called" not in launched.stderr, launched.stderr  # the clean exit
    received = sum(max(step) for step in got["visual_bytes_received"])
    every_row = sum(max(step) for step in got["visual_rows_per_replica"]) * got["visual_row_bytes"]
    assert 0 < received <= 0.6 * every_row, (got["visual_bytes_received"], got["visual_rows_per_replica"])
    print("torchrun train cp 2, owner:", got["losses"], "spawned, all:", ab["sharded"]["losses"])
    print("  visual bytes received by the largest rank / every row: %.3f" % (received / every_row))


def test_train_json_has_the_cpp_shape(launched, one):
    for got, cp in ((json.loads(launched.stdout), 2), (one, 1)):
        assert CPP_TRAIN_KEYS <= set(got), sorted(CPP_TRAIN_KEYS - set(got))
        assert got["name"] == "train" and len(got["losses"]) == 2, got["name"]
        assert isinstance(got["mean_vision_seconds"], float) and got["mean_vision_seconds"] > 0
        # per step, then per rank (the C++ order)
        assert [len(s) for s in got["vision_seconds_per_rank"]] == [cp, cp], got["vision_seconds_per_rank"]


@pytest.fixture(scope="module")
def dp2():
    # mesh_dims [cp] spawned (at CP 1 each replica encodes its own frames); [dp, cp] under torchrun
    # as `ab`, whose two arms run in the same two processes: replicated (each replica its own
    # tower, as [cp]) and sharded (the frames of both replicas pooled over both ranks).
    fast = ["--family", "qwen2_vl", "--cp", "1", "--dp", "2", "--json", *FAST]
    per_replica = frameshard("train", *fast, MESH_DIMS, "[cp]")
    mesh = frameshard("ab", *fast, MESH_DIMS, "[dp, cp]", "--plot", "", launcher=TORCHRUN)
    return json.loads(per_replica.stdout), json.loads(mesh.stdout)


def test_dp2_over_the_mesh_equals_per_replica(dp2, one):
    per_replica, ab = dp2
    mesh = ab["sharded"]
    for other in (per_replica, ab["replicated"]):
        diff = max(abs(a - b) for a, b in zip(other["losses"], mesh["losses"], strict=True))
        assert diff <= 1e-5, (other["losses"], mesh["losses"])
    assert per_replica["arm"] == "unsharded" and per_replica["recipe"][MESH_DIMS[2:]] == ["cp"]
    assert mesh["dp"] == 2 and ab["recipe"][MESH_DIMS[2:]] == ["dp", "cp"], ab["recipe"]
    assert all(max(step) > 0 for step in mesh["visual_bytes_received"]), mesh["visual_bytes_received"]
    # replica 1 draws its own batches: more frames than replica 0's alone, another mean loss
    assert all(a > b for a, b in zip(mesh["frames_total"], one["frames_total"], strict=True))
    assert mesh["losses"] != one["losses"], (mesh["losses"], one["losses"])
    print("dp 2 [cp]:", per_replica["losses"], "[dp, cp]:", mesh["losses"], "replicated:", ab["replicated"]["losses"])


def test_recipe_and_errors():
    recipe = json.loads(frameshard("train", "--print-config", "--cp", "3", "--data.preset", "doc").stdout)
    assert recipe["distributed.cp_size"] == 3 and recipe["data.preset"] == "doc"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    video = os.path.join(root, "examples", "recipes", "qwen3_vl_cp2_vision_frame_shard_video.yaml")
    recipe = json.loads(frameshard("ab", "--print-config", "--config", video, "--train.steps", "3").stdout)
    assert recipe["data.preset"] == "video" and recipe["train.steps"] == 3  # a C++ recipe, overridden
    bad = frameshard("train", "--print-config", "--nonsense.key", "1", check=False)
    assert bad.returncode == 2 and "error: frameshard train: expected a recipe key, got 'nonsense.key'" in bad.stderr
    rank = {"RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    bad = frameshard("train", "--cp", "2", env=rank, check=False)  # refused before any rendezvous
    assert bad.returncode == 2 and "distributed.cp_size: expected WORLD_SIZE / dp = 3" in bad.stderr, bad.stderr


def test_model_dir_trains_the_checkpoints_weights(one, tmp_path):
    # The tiny model of another seed, saved as a checkpoint and trained with the default seed: the
    # losses of that seed's tiny model only if the checkpoint's weights (not new random ones of
    # train.seed) are the ones trained; its config gives the family and the token ids.
    from frameshard.cli import _ab as hf_ab

    recipe, _ = hf_ab.resolve_recipe(None, [], **{"model.family": "qwen2_vl", "train.seed": 7})
    hf_ab.tiny_model(recipe).save_pretrained(str(tmp_path))
    got = json.loads(frameshard("train", "--model-dir", str(tmp_path), "--cp", "1", "--json", *FAST).stdout)
    seed7 = json.loads(
        frameshard("train", "--family", "qwen2_vl", "--train.seed", "7", "--cp", "1", "--json", *FAST).stdout
    )
    assert got["family"] == "qwen2_vl"
    losses, want = got["losses"], seed7["losses"]
    assert max(abs(a - b) for a, b in zip(losses, want, strict=False)) <= 1e-6, (losses, want)
    assert losses != one["losses"], losses  # not the default seed's random weights
    bad = frameshard("train", "--model-dir", str(tmp_path / "missing"), "--cp", "1", check=False)
    assert bad.returncode != 0 and "model.model_dir: expected a checkpoint with config.json" in bad.stderr, bad.stderr


def test_the_grpo_batch_is_the_cpp_presets_prompt_sampled_group_size_times():
    """`--data.preset grpo` draws the C++ preset's prompt (grpo_prompt_workload, the same seed and
    scale as the C++ trainer's data) and repeats it, pixels and all, data.group_size times."""
    from frameshard import _C
    from frameshard.cli import _ab, _batch

    recipe, _ = _ab.resolve_recipe(None, [("data.preset", "grpo"), ("data.group_size", "3")])
    geo = _batch.Geometry(3, 2, 5, (10, 100), patch=14, temporal=2, merge=2, channels=3)
    batch = _batch.make_batch(recipe, step=1, geo=geo)
    seed, _ = _batch.replica_seeds(recipe, 1, 0)
    prompt = [(1, h, w) for t, h, w in _C.grpo_prompt_workload(seed, int(recipe["data.scale"]))[0] for _ in range(t)]
    assert batch["image_grid_thw"].tolist() == [list(g) for g in prompt] * 3
    rows = batch["pixel_values"].shape[0] // 3
    assert torch.equal(batch["pixel_values"][:rows], batch["pixel_values"][2 * rows :])
