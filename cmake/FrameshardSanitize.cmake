# Sanitizer and fuzzing builds (CI's sanitizer and fuzz-smoke tiers, .ci/run).
#
#   -DFRAMESHARD_SANITIZE=address,undefined   ASan + UBSan on every target
#   -DFRAMESHARD_SANITIZE=thread              TSan on every target
#   -DFRAMESHARD_FUZZ=ON                      libFuzzer harnesses (tests/fuzz),
#                                             clang only; implies ASan + UBSan
#
# The flags go on every target of this project (add_compile_options before the
# first target); prebuilt libraries (LibTorch, Gloo, yaml-cpp, GTest) stay
# uninstrumented, see docs/reliability.md for what that means and the
# run-time options the tiers use. UB aborts (-fno-sanitize-recover) so a test
# or a fuzz run fails on it instead of printing and going on.
set(FRAMESHARD_SANITIZE "" CACHE STRING
    "Sanitizers for every target: '', 'address,undefined' or 'thread'")
option(FRAMESHARD_FUZZ "Build the libFuzzer harnesses of tests/fuzz (clang)" OFF)

set(_fs_sanitize "${FRAMESHARD_SANITIZE}")
if(FRAMESHARD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FRAMESHARD_FUZZ=ON: expected clang (libFuzzer), got "
      "${CMAKE_CXX_COMPILER_ID}; configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(_fs_sanitize STREQUAL "")
    set(_fs_sanitize "address,undefined")
  endif()
  # Coverage instrumentation everywhere; only the harnesses link the driver.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

if(NOT _fs_sanitize STREQUAL "")
  if(_fs_sanitize MATCHES "thread" AND _fs_sanitize MATCHES "address")
    message(FATAL_ERROR "FRAMESHARD_SANITIZE: expected 'address,undefined' or "
      "'thread' (TSan and ASan do not combine), got '${_fs_sanitize}'")
  endif()
  # -g1 (line tables: reports still name function, file and line) and not -g:
  # coming after the build type's flags, a -g here undid scripts/sanitize.sh's
  # -g1 and cost a third of each compile against torch's headers (measured,
  # gcc 12 under ASan + UBSan at -O1: src/runtime/gloo_groups.cpp 18.4 s of
  # CPU with -g, 11.6 s with -g1; a unit-test batch 25.3 s, 19.1 s).
  add_compile_options(-fsanitize=${_fs_sanitize} -fno-omit-frame-pointer -g1)
  add_link_options(-fsanitize=${_fs_sanitize})
  if(_fs_sanitize MATCHES "undefined")
    add_compile_options(-fno-sanitize-recover=undefined)
  endif()
  message(STATUS "frameshard: sanitizers: ${_fs_sanitize}")
endif()

# frameshard_sanitize_torch_flags(<target>): for the bottom LibTorch layer
# (PUBLIC, so every target above it gets it; build tree only, never exported).
# gcc 12's -Wmaybe-uninitialized misfires on torch's own headers once ASan
# instruments them: the intrusive_ptr copy of a defaulted
# `std::optional<at::Generator> = std::nullopt` argument (Tensor::uniform_,
# TensorBody.h) is reported "may be used uninitialized" in a source that builds
# warning-free without the sanitizer (src/models/qwen_blocks.cpp, measured).
# It stays a warning (printed), not an error, in gcc sanitizer builds only;
# the normal -Werror build still checks our code for it.
# Under TSan, gcc 12's -Wtsan says "atomic_thread_fence is not supported with
# -fsanitize=thread" for the fences in the standard library's atomics that
# torch's headers use (seen in src/runtime/gather.cpp): TSan does not model a
# stand-alone fence, so a race it reports through one would need a look;
# the warning stays printed, not an error.
function(frameshard_sanitize_torch_flags target)
  if(NOT "${_fs_sanitize}" STREQUAL "" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PUBLIC
      $<BUILD_INTERFACE:-Wno-error=maybe-uninitialized>)
    if(_fs_sanitize MATCHES "thread")
      target_compile_options(${target} PUBLIC $<BUILD_INTERFACE:-Wno-error=tsan>)
    endif()
  endif()
endfunction()
