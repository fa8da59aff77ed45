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
# The header is force-included into every source of the target, so a test
# that forgets an include still builds here; -DFRAMESHARD_PCH=OFF catches it.
# ccache caches these compiles only with the sloppiness that the compiler
# launcher of the top-level CMakeLists.txt sets.
option(FRAMESHARD_PCH "Precompile <torch/torch.h> for the test programs" ON)

function(frameshard_torch_pch target)
  if(FRAMESHARD_PCH)
    target_precompile_headers(${target} PRIVATE <torch/torch.h>)
  endif()
endfunction()
