# What each layer may include. Included by CMakeLists.txt at configure time
# (a violation fails the configure step) and runnable on any tree:
#   cmake -DFRAMESHARD_LAYERS_ROOT=<dir> -P cmake/check_layers.cmake
# tests/layers/layers_test.sh runs it on a copy with deliberate violations.
#
# A layer's files are its sources (src/<layer>/) and its public headers. The
# rule is a regular expression over the text of #include lines; a match is a
# violation. Layers are listed bottom-up: each may include those below it.
#   core     the planning, torch-free: no ATen, c10, torch, c10d; no
#            yaml-cpp or nlohmann-json and no io layer; nothing above it
#   io       (src/io and the config, manifest and xml headers, the core.h
#            umbrella) config and file formats: core's rule but for the io
#            layer itself
#   tower    ATen only: no c10d; no model, no runtime
#   models   no c10d, no runtime
#   runtime  no model
#   parity   (internal parity harness) no model: towers come from a factory
#   train    (src/train, include/frameshard/train) may include any of the
#            above; none of them may include it
#   dist_tests  the runtime's multi-rank tests (tests/dist/*) and their
#            helpers (tests/testing/*, but for the Qwen fixtures): no model,
#            so frameshard_dist_tests builds (and the sanitizer tiers build
#            it) without the models layer; tests/dist/towers/ may include
#            any (the Qwen towers, the toy tower)
# Other upper layers (tools/, tests/, bench/, python/) may include any.

if(NOT FRAMESHARD_LAYERS_ROOT)
  message(FATAL_ERROR "check_layers: set FRAMESHARD_LAYERS_ROOT")
endif()

set(_torch "(ATen|c10|torch|caffe2)/")
set(_dist "(c10d|torch/csrc/distributed)/|frameshard/runtime/|\"runtime/")
set(_models "frameshard/models/|\"models/")
set(_tower "frameshard/tower\\.h|\"tower/")
set(_train "frameshard/train/|\"train/")
set(_io_headers include/frameshard/config.h include/frameshard/media_manifest.h
    include/frameshard/xml.h include/frameshard/core.h)
set(_io "\"io/|frameshard/(config|media_manifest|xml|core)\\.h|yaml-cpp/|nlohmann/")

# name | globs (relative to the root) | forbidden-include regex
set(_layer_core_globs src/core/*.cpp src/core/*.h include/frameshard/*.h)
set(_layer_core_rule "${_torch}|${_dist}|${_models}|${_tower}|${_train}|${_io}")
set(_layer_io_globs src/io/*.cpp src/io/*.h ${_io_headers})
set(_layer_io_rule "${_torch}|${_dist}|${_models}|${_tower}|${_train}")
set(_layer_tower_globs src/tower/*.cpp src/tower/*.h include/frameshard/tower.h)
set(_layer_tower_rule "${_dist}|${_models}|${_train}")
set(_layer_models_globs src/models/*.cpp src/models/*.h
    include/frameshard/models/*.h)
set(_layer_models_rule "${_dist}|${_train}")
set(_layer_runtime_globs src/runtime/*.cpp src/runtime/*.h
    include/frameshard/runtime/*.h)
set(_layer_runtime_rule "${_models}|${_train}")
set(_layer_parity_globs src/parity/*.cpp src/parity/*.h)
set(_layer_parity_rule "${_models}|${_train}")
set(_layer_dist_tests_globs tests/dist/*.cpp tests/testing/*.cpp tests/testing/*.h)
set(_layer_dist_tests_rule "${_models}|${_train}|qwen_fixtures\\.h")
# Top-level headers that are not core: the tower contract, the umbrella and
# the io layer's.
set(_core_exempt include/frameshard/tower.h include/frameshard/frameshard.h
    ${_io_headers})

set(_violations "")
foreach(layer core io tower models runtime parity dist_tests)
  set(_files "")
  foreach(g IN LISTS _layer_${layer}_globs)
    file(GLOB _found RELATIVE ${FRAMESHARD_LAYERS_ROOT}
         ${FRAMESHARD_LAYERS_ROOT}/${g})
    list(APPEND _files ${_found})
  endforeach()
  if(layer STREQUAL "core")
    list(REMOVE_ITEM _files ${_core_exempt})
  elseif(layer STREQUAL "dist_tests")
    list(REMOVE_ITEM _files tests/testing/qwen_fixtures.cpp
         tests/testing/qwen_fixtures.h)
  endif()
  foreach(f IN LISTS _files)
    file(STRINGS ${FRAMESHARD_LAYERS_ROOT}/${f} _includes
         REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
    foreach(line IN LISTS _includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*" "" _target "${line}")
      if(_target MATCHES "${_layer_${layer}_rule}")
        string(APPEND _violations "\n  ${f}: ${layer} must not include ${_target}")
      endif()
    endforeach()
  endforeach()
endforeach()

if(_violations)
  message(FATAL_ERROR "frameshard layer check failed:${_violations}\n"
    "(what each layer may include: cmake/check_layers.cmake)")
endif()
