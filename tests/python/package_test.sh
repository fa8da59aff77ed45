#!/usr/bin/env bash
# The Python package as a user gets it: sets up the modern-tier venv (scripts/setup-modern.sh;
# fast when it is already there), installs the package into it with the README's line
# (`pip install --no-build-isolation .`: builds frameshard._C against the venv's torch, with
# warnings as errors) on a machine as a cluster node has it -- Debian's yaml-cpp, nlohmann-json
# and gloo packages hidden (scripts/without-debian-deps.sh), so only torch, the compiler, CMake
# and the PyPI build requirements of pyproject.toml are there -- checks that the module links
# the PyPI yaml-cpp, runs the Python test files with the venv's pytest, then the README's
# two-process training-step example under torchrun.
# Usage: bash tests/python/package_test.sh <repo root> [install | pytest FILE... | example]
#   no step: all of them in turn. ctest runs `install` as the fixture of the
#   others (python.install), then the test files and the example as tests of
#   their own, so they run in parallel with each other and the cli tests.
set -euo pipefail
ROOT=${1:?usage: package_test.sh <repo root> [install | pytest FILE... | example]}
ROOT=$(cd "$ROOT" && pwd)
step=${2:-all}
shift $(($# < 2 ? $# : 2))
VENV=${FRAMESHARD_VENV:-$ROOT/.venv}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

run_pytest() {
  cd "$ROOT"
  "$VENV/bin/python" -m pytest -q -s -p no:cacheprovider --basetemp "$TMP/pytest" "$@"
}
run_example() {
  cd "$ROOT"
  "$VENV/bin/torchrun" --standalone --nproc-per-node 2 examples/python/hf_train_step.py
  # docs/python-wrappers.md's FSDP2 + DeviceMesh script, on both families it shows: cp 2, then dp 2 x cp 2.
  OMP_NUM_THREADS=1 "$VENV/bin/torchrun" --standalone --nproc-per-node 2 \
    examples/python/fsdp2_device_mesh.py --family qwen2_5_vl
  OMP_NUM_THREADS=1 "$VENV/bin/torchrun" --standalone --nproc-per-node 4 \
    examples/python/fsdp2_device_mesh.py --family qwen3_vl --dp 2
  # docs/trl.md's GRPO script: TRL's trainer with frameshard, 2 processes, 2 steps.
  OMP_NUM_THREADS=1 "$VENV/bin/torchrun" --standalone --nproc-per-node 2 \
    examples/python/trl_grpo.py --steps 2 --output-dir "$TMP/trl_grpo"
  # docs/python-trl-sft.md's SFT script: TRL's SFTTrainer with context parallelism 2, 2 steps.
  OMP_NUM_THREADS=1 "$VENV/bin/torchrun" --standalone --nproc-per-node 2 \
    examples/python/trl_sft_cp.py --steps 2 --output-dir "$TMP/trl_sft_cp"
}
case "$step" in
pytest)
  run_pytest "$@"
  exit 0
  ;;
example)
  run_example
  exit 0
  ;;
install | all) ;;
*)
  echo "package_test: expected a step install, pytest or example, got '$step'" >&2
  exit 2
  ;;
esac

bash "$ROOT/scripts/setup-modern.sh"
# A fresh configure: a cache from a build that saw Debian's packages would keep their paths.
rm -f "$ROOT"/build-python-*/CMakeCache.txt
start=$(date +%s)
bash "$ROOT/scripts/without-debian-deps.sh" env \
  CMAKE_BUILD_PARALLEL_LEVEL="${FRAMESHARD_JOBS:-2}" "$VENV/bin/python" -m pip install -q \
  --no-build-isolation -C cmake.define.FRAMESHARD_WERROR=ON "$ROOT"
echo "package_test: pip install . (Debian's C++ packages hidden) took $(($(date +%s) - start)) s"

cd "$TMP"  # import the installed package, not python/frameshard
so=$("$VENV/bin/python" -c 'import frameshard._C as c; print(c.__file__)')
yaml=$(ldd "$so" | awk '/libyaml-cpp/ {print $3}')
case "$yaml" in
*/cmeel.prefix/lib/*) echo "package_test: _C links $yaml" ;;
*)
  echo "package_test: expected _C to link the PyPI yaml-cpp (cmeel.prefix), got '$yaml'" >&2
  exit 1
  ;;
esac
"$VENV/bin/python" -c 'import frameshard; b = frameshard.build_info(); print(b["text"], end="")
assert not b["gloo_groups"], b'
[ "$step" = all ] || exit 0

run_pytest tests/python/test_package.py tests/python/test_costs.py tests/python/test_wrappers.py \
  tests/python/test_mesh.py tests/python/test_families.py tests/python/test_cp_lm.py \
  tests/python/test_hf_ab.py tests/python/test_hf_split.py tests/python/test_layout.py \
  tests/python/test_device_mesh.py tests/python/test_trl.py tests/python/test_trl_sft.py
run_example
