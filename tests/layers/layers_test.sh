#!/usr/bin/env bash
# The layer check (cmake/check_layers.cmake) passes on this tree and fails,
# naming the file and the include, on each deliberate violation: a core
# source including ATen, a models source including c10d, the runtime
# including a model, the tower contract including the runtime, a core public
# header including torch, the parity harness including a model, the
# planning including the io layer (config, JSON, yaml) and io including torch.
# Usage: bash tests/layers/layers_test.sh <repo-root>
set -eu
ROOT=${1:?usage: layers_test.sh <repo-root>}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

check() { cmake -DFRAMESHARD_LAYERS_ROOT="$1" -P "$ROOT/cmake/check_layers.cmake"; }

check "$ROOT" >/dev/null 2>&1 || { check "$ROOT"; echo "FAIL: the tree itself violates a layer" >&2; exit 1; }

fail=0
violate() {  # violate <file> <include line> <expected text in the error>
  rm -rf "$TMP/tree"
  mkdir -p "$TMP/tree"
  cp -r "$ROOT/src" "$ROOT/include" "$TMP/tree/"
  mkdir -p "$TMP/tree/tests"
  cp -r "$ROOT/tests/dist" "$ROOT/tests/testing" "$TMP/tree/tests/"
  mkdir -p "$(dirname "$TMP/tree/$1")"
  printf '%s\n' "$2" >>"$TMP/tree/$1"
  if out=$(check "$TMP/tree" 2>&1); then
    echo "FAIL: '$2' in $1 was accepted" >&2
    fail=1
  elif ! grep -qF "$3" <<<"$out"; then
    echo "FAIL: '$2' in $1: the error does not say '$3':" >&2
    echo "$out" >&2
    fail=1
  else
    echo "ok: rejected '$2' in $1"
  fi
}
violate src/core/plan.cpp '#include <ATen/ATen.h>' 'src/core/plan.cpp: core must not include <ATen/ATen.h>'
violate src/core/plan.cpp '#include <frameshard/tower.h>' 'core must not include <frameshard/tower.h>'
violate include/frameshard/plan.h '#include <torch/torch.h>' 'include/frameshard/plan.h: core must not include <torch/torch.h>'
violate src/core/plan.cpp '#include "io/json_text.h"' 'src/core/plan.cpp: core must not include "io/json_text.h"'
violate src/core/policy.cpp '#include <frameshard/config.h>' 'src/core/policy.cpp: core must not include <frameshard/config.h>'
violate include/frameshard/plan.h '#include <nlohmann/json.hpp>' 'include/frameshard/plan.h: core must not include <nlohmann/json.hpp>'
violate src/core/partition.cpp '#include <yaml-cpp/yaml.h>' 'core must not include <yaml-cpp/yaml.h>'
violate src/io/config.cpp '#include <ATen/ATen.h>' 'src/io/config.cpp: io must not include <ATen/ATen.h>'
violate include/frameshard/config.h '#include "train/trainer.h"' 'include/frameshard/config.h: io must not include "train/trainer.h"'
violate src/models/qwen2_vl.cpp '#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>' 'models must not include'
violate src/models/qwen2_vl.cpp '#include <frameshard/runtime/gather.h>' 'models must not include <frameshard/runtime/gather.h>'
violate include/frameshard/models/toy_tower.h '#include <c10d/Types.hpp>' 'models must not include <c10d/Types.hpp>'
violate src/runtime/encode.cpp '#include <frameshard/models/toy_tower.h>' 'runtime must not include <frameshard/models/toy_tower.h>'
violate src/runtime/encode.cpp '#include "models/qwen_blocks.h"' 'runtime must not include "models/qwen_blocks.h"'
violate src/tower/tower.cpp '#include <frameshard/runtime/encode.h>' 'tower must not include'
violate src/tower/new_file.cpp '#include "runtime/consensus.h"' 'src/tower/new_file.cpp: tower must not include'
violate src/parity/run_rank.cpp '#include <frameshard/models/toy_tower.h>' 'src/parity/run_rank.cpp: parity must not include <frameshard/models/toy_tower.h>'
violate tests/dist/gather_test.cpp '#include <frameshard/models/toy_tower.h>' 'tests/dist/gather_test.cpp: dist_tests must not include <frameshard/models/toy_tower.h>'
violate tests/testing/run_ranks.h '#include "testing/qwen_fixtures.h"' 'dist_tests must not include "testing/qwen_fixtures.h"'
# The towers' multi-rank tests may (and do) include the models layer.
rm -rf "$TMP/tree" && mkdir -p "$TMP/tree/tests" && cp -r "$ROOT/src" "$ROOT/include" "$TMP/tree/" &&
  cp -r "$ROOT/tests/dist" "$ROOT/tests/testing" "$TMP/tree/tests/" &&
  printf '%s\n' '#include <frameshard/models/toy_tower.h>' >>"$TMP/tree/tests/dist/towers/new_test.cpp"
if ! out=$(check "$TMP/tree" 2>&1); then
  echo "FAIL: a models include in tests/dist/towers/ was rejected:" >&2
  echo "$out" >&2
  fail=1
else
  echo "ok: accepted a models include in tests/dist/towers/"
fi
[ "$fail" -eq 0 ] || exit 1
echo "layers_test: all checks passed"
