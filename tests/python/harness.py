"""The multi-process side of the frameshard package tests, shared by test_package.py and
test_wrappers.py: launching one worker script as W Gloo rank processes, reading their results,
and the parity assertions.

A worker (package_worker.py, train_worker.py; worker_common.main does the rank side) runs every
scenario it is asked for in one process per rank and writes OUT/rank<R>.json, {scenario: {"ok":
bool, "error": str, ...measurements}}: one launch per world size serves every test of a file.
"""

import json
import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD_TIMEOUT_S = 600

# Tolerances of sharded against replicated, relative to max(1, the largest replicated value).
# float64 sharded vs replicated: only the summation order differs (pure-torch tower: 1e-9). The
# transformers vision towers compute rotary embeddings and the attention softmax in float32 even
# in a float64 model, so a float64 rounding difference can flip a float32 rounding: 1e-5.
RTOL_TORCH = 1e-9
RTOL_HF = 1e-5
# bfloat16 / float16 steps have no fixed bound: both runs are measured against a float64 step of
# the same rounded weights and inputs, and the sharded run's error may be this many times the
# replicated run's (measured at most 1.0 over every family, dtype and world; test_wrappers.py).
LOWP_ERR_FACTOR = 1.5


def run_world(worker, world, args=()):
    """Runs tests/python/<worker> as `world` Gloo ranks (one process each, OMP_NUM_THREADS=1);
    returns their results in rank order. Fails the test when a rank exits non-zero or does not
    finish within WORLD_TIMEOUT_S."""
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    os.path.join(HERE, worker),
                    "--rank=%d" % r,
                    "--world=%d" % world,
                    "--store=" + store,
                    "--out=" + tmp,
                    *args,
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for r in range(world)
        ]
        logs = []
        for p in procs:
            try:
                logs.append(p.communicate(timeout=WORLD_TIMEOUT_S)[0])
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                pytest.fail("%s world %d: a rank did not finish in %d s" % (worker, world, WORLD_TIMEOUT_S))
        for r, p in enumerate(procs):
            assert p.returncode == 0, "%s rank %d/%d exited %d:\n%s" % (worker, r, world, p.returncode, logs[r])
        results = []
        for r in range(world):
            with open(os.path.join(tmp, "rank%d.json" % r)) as f:
                results.append(json.load(f))
        return results


def run_selected(worker, world):
    """run_world passing FRAMESHARD_TEST_SCENARIOS (a,b or "all") to the worker as --scenarios,
    so a developer runs only those scenarios (or every one, the by-hand ones too)."""
    only = os.environ.get("FRAMESHARD_TEST_SCENARIOS")
    return run_world(worker, world, ["--scenarios=" + only] if only else [])


def scenario_or_skip(world_results, name, why):
    """scenario(world_results, name), or a skip naming `why` (where the worker decides which
    scenarios run at which world) when this world did not run it."""
    world, results = world_results
    if name not in results[0]:
        pytest.skip("%s is not run at world %d (%s, FRAMESHARD_TEST_SCENARIOS)" % (name, world, why))
    return scenario(world_results, name)


def scenario(world_results, name):
    """(world, [rank results]) of scenario `name`; fails with the rank's error and traceback if
    it raised on any rank."""
    world, results = world_results
    per_rank = [r[name] for r in results]
    for rank, res in enumerate(per_rank):
        assert res["ok"], "world %d rank %d %s: %s\n%s" % (world, rank, name, res.get("error"), res.get("trace"))
    return world, per_rank


def assert_no_less_accurate(name, world, rank, res):
    """A low-precision step of `res` (its out / grad errors against float64, the replicated run's
    ref_* ones, and *_diff: sharded - replicated): the sharded error at most LOWP_ERR_FACTOR times
    the replicated one, the difference at most (1 + LOWP_ERR_FACTOR) times it (the triangle
    inequality)."""
    for what in ("out", "grad"):
        ref_err, err, diff = res["ref_%s_err" % what], res["%s_err" % what], res["%s_diff" % what]
        assert ref_err > 0 or (err == 0 and diff == 0), (name, what, res)
        assert err <= LOWP_ERR_FACTOR * ref_err, (name, world, rank, what, err, ref_err)
        assert diff <= (1 + LOWP_ERR_FACTOR) * ref_err, (name, world, rank, what, diff, ref_err)
    errors = (res["out_err"], res["ref_out_err"], res["grad_err"], res["ref_grad_err"], res["grad_scale"])
    print(
        "low precision %-26s world %d rank %d: error vs float64 sharded/replicated outputs %.3g/%.3g "
        "grads %.3g/%.3g (grad scale %.3g)" % ((name, world, rank) + errors)
    )


def assert_parity(world, name, per_rank, rtol, path="sharded"):
    """Every rank took `path` and its outputs and reduced gradients are within rtol (relative to
    max(1, scale)) of the replicated run's."""
    for rank, res in enumerate(per_rank):
        assert res["path"] == path, (name, world, rank, res["path"])
        assert res["out_diff"] <= rtol * max(1.0, res["out_scale"]), (name, world, rank, res["out_diff"])
        assert res["grad_diff"] <= rtol * max(1.0, res["grad_scale"]), (name, world, rank, res["grad_diff"])
        print(
            "parity %-26s world %d rank %d: outputs max diff %.3g (scale %.3g), grads max diff %.3g (scale %.3g)"
            % (name, world, rank, res["out_diff"], res["out_scale"], res["grad_diff"], res["grad_scale"])
        )
