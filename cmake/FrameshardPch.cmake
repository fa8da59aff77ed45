# Precompiled <torch/torch.h> for the test programs (FRAMESHARD_PCH).
#
# Measured on this project's 2-core machine (gcc 12, -O3, torch 2.x; user
# CPU seconds of one translation unit, the header precompiled once per
# target in about 40 s):
#   a source including torch/torch.h (src/models/qwen2_vl.cpp)  26.8 -> 10.6 s
#   a source including only ATen (safetensors_file.cpp)         14.3 -> 10.0 s
#   a source including neither (qwen_config.cpp)                  1.6 ->  8.0 s
# and for the models + runtime libraries as a whole (27 sources, 6 of them
# light) 531 -> 490 CPU s: loading the 700 MB header costs what parsing
# ATen alone does, so it only pays where every source includes torch.h. The
# test programs are such targets (run_ranks.h, the fixtures); the libraries
# and the CLI, with their torch-free sources, are not, and stay without it.
#
# One header for all of them: the first target to call frameshard_torch_pch
# compiles it, the others reuse it (REUSE_FROM; they compile with the same
# flags). Five test targets each compiling their own took 35-39 s apiece
# (181 CPU s of a 447 CPU s test build); sharing it saves four of them in
# every build that builds the tests, the sanitizer tiers' included. The
# first caller must be a target every test build builds (frameshard_testing).
# The header records -fPIC or -fPIE, and CMake gives a library the one and an
# executable the other (gcc: "created and used with different settings of
# -fpie"), so every target that shares it compiles with -fPIC, last on the
# line (position-independent code links into a PIE executable too). gcc also
# refuses it where a macro defined when it was compiled is not ("not used
# because FRAMESHARD_WITH_NCCL not defined": frameshard_testing's own), so
# the targets that reuse it get the first one's compile definitions.
#
# The header is force-included into every source of the target, so a test
# that forgets an include still builds here; -DFRAMESHARD_PCH=OFF catches it.
# ccache caches these compiles only with the sloppiness that the compiler
# launcher of the top-level CMakeLists.txt sets.
option(FRAMESHARD_PCH "Precompile <torch/torch.h> for the test programs" ON)

function(frameshard_torch_pch target)
  if(NOT FRAMESHARD_PCH)
    return()
  endif()
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
  get_property(owner GLOBAL PROPERTY FRAMESHARD_TORCH_PCH_OWNER)
  if(owner)
    target_precompile_headers(${target} REUSE_FROM ${owner})
    target_compile_definitions(${target} PRIVATE
                               $<TARGET_PROPERTY:${owner},COMPILE_DEFINITIONS>)
  else()
    target_precompile_headers(${target} PRIVATE <torch/torch.h>)
    set_property(GLOBAL PROPERTY FRAMESHARD_TORCH_PCH_OWNER ${target})
  endif()
endfunction()
