# Precompiled <torch/torch.h> for the LibTorch targets with several sources.
#
# Parsing torch/torch.h is most of a LibTorch translation unit's compile time
# (measured on this project's 2-core machine, gcc 12, -O3, torch 2.x:
# src/models/qwen2_vl.cpp 26.8 s, of which 22.0 s is -fsyntax-only; 10.6 s
# with the header precompiled, which itself takes 40 s once per target), so
# a target of n sources gains about 16 s x n - 40 s. Each target gets its own
# precompiled header (their compile flags differ: FRAMESHARD_WITH_NCCL, the
# warnings), never one shared across targets.
#
# The header is force-included into every source of the target, so a source
# that forgets an include still builds here: the layer check
# (cmake/check_layers.cmake) reads the #include lines, not the build, and the
# -DFRAMESHARD_PCH=OFF build (clang-tidy's, the fuzz build) still catches a
# missing include.
#
# ccache caches these compiles only with CCACHE_SLOPPINESS=pch_defines,
# time_macros,include_file_mtime,include_file_ctime, which the compiler
# launcher of the top-level CMakeLists.txt sets.
option(FRAMESHARD_PCH "Precompile <torch/torch.h> for the LibTorch targets" ON)

function(frameshard_torch_pch target)
  if(FRAMESHARD_PCH)
    target_precompile_headers(${target} PRIVATE <torch/torch.h>)
  endif()
endfunction()
