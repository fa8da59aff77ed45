# Selects the one LibTorch frameshard builds against: the torch package of a
# Python environment (PyPI's torch 2.x, CUDA build with Gloo and NCCL), and
# makes sure nothing of another torch (e.g. Debian's libtorch-dev 1.13 in
# /usr) enters the build.
#
#   -DFRAMESHARD_PYTHON=/path/to/python   the environment whose torch to use
#                                         (default: <repo>/.venv/bin/python,
#                                         made by scripts/setup-modern.sh)
#   -DFRAMESHARD_TORCH_PREFIX=<dir>       or the torch package root directly
#                                         (the directory of torch/__init__.py)
#
# Why pin every path: TorchConfig.cmake looks for Caffe2Config.cmake and for
# libc10/libtorch with PATHS, which CMake searches *after* the system
# prefixes. With libtorch-dev installed, find_package(Torch) with only
# Torch_DIR set loads Debian's Caffe2 config and links Debian's libtorch.so
# next to the wheel's headers; such a program aborts at start-up (a c10
# DispatchKeySet internal assert). So the torch prefix goes first in
# CMAKE_PREFIX_PATH, Caffe2_DIR is set, and every library and include
# directory Torch reports is checked to lie inside the prefix.
#
# Sets: FRAMESHARD_TORCH_PREFIX, FRAMESHARD_TORCH_VERSION,
# FRAMESHARD_TORCH_HAS_CUDA, FRAMESHARD_NCCL_INCLUDE_DIR and
# FRAMESHARD_NCCL_LIBRARY (when the environment has NCCL), and Torch's own
# TORCH_LIBRARIES / TORCH_INCLUDE_DIRS.

# (Declared only when unset: an including package config sets a plain
# variable, which set(CACHE) would hide under policy CMP0126 OLD.)
if(NOT DEFINED FRAMESHARD_PYTHON)
  set(FRAMESHARD_PYTHON "" CACHE FILEPATH
      "Python whose torch frameshard builds against (default: .venv/bin/python)")
endif()
if(NOT DEFINED FRAMESHARD_TORCH_PREFIX)
  set(FRAMESHARD_TORCH_PREFIX "" CACHE PATH
      "torch package root (default: asked from FRAMESHARD_PYTHON)")
endif()

if(NOT FRAMESHARD_TORCH_PREFIX)
  if(NOT FRAMESHARD_PYTHON)
    if(EXISTS ${CMAKE_SOURCE_DIR}/.venv/bin/python)
      set(FRAMESHARD_PYTHON ${CMAKE_SOURCE_DIR}/.venv/bin/python)
    else()
      message(FATAL_ERROR
        "frameshard: expected a Python environment with torch 2.x "
        "(run scripts/setup-modern.sh, or pass -DFRAMESHARD_PYTHON=<python> "
        "or -DFRAMESHARD_TORCH_PREFIX=<torch package dir>), got no "
        "${CMAKE_SOURCE_DIR}/.venv; or configure with "
        "-DFRAMESHARD_BUILD_RUNTIME=OFF for the torch-free core only")
    endif()
  endif()
  # find_spec, not `import torch`: answers in milliseconds.
  execute_process(
    COMMAND ${FRAMESHARD_PYTHON} -c
      "import importlib.util as u; s = u.find_spec('torch'); print(s.submodule_search_locations[0] if s else '')"
    OUTPUT_VARIABLE _prefix OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT _prefix)
    set(_hint "")
    if(SKBUILD)
      # pip's isolated build environment hides the environment's packages.
      string(CONCAT _hint "; pip's build isolation hides the environment's "
             "torch: install with `pip install --no-build-isolation .`")
    endif()
    message(FATAL_ERROR "frameshard: expected torch in ${FRAMESHARD_PYTHON}, "
                        "got none (exit ${_rc})${_hint}")
  endif()
  set(FRAMESHARD_TORCH_PREFIX ${_prefix} CACHE PATH
      "torch package root (default: asked from FRAMESHARD_PYTHON)" FORCE)
endif()
get_filename_component(FRAMESHARD_TORCH_PREFIX ${FRAMESHARD_TORCH_PREFIX}
                       REALPATH)
if(NOT EXISTS ${FRAMESHARD_TORCH_PREFIX}/share/cmake/Torch/TorchConfig.cmake)
  message(FATAL_ERROR "frameshard: expected ${FRAMESHARD_TORCH_PREFIX}/share/"
                      "cmake/Torch/TorchConfig.cmake, got no such file")
endif()

list(PREPEND CMAKE_PREFIX_PATH ${FRAMESHARD_TORCH_PREFIX})
set(Torch_DIR ${FRAMESHARD_TORCH_PREFIX}/share/cmake/Torch CACHE PATH "" FORCE)
set(Caffe2_DIR ${FRAMESHARD_TORCH_PREFIX}/share/cmake/Caffe2 CACHE PATH "" FORCE)
# The CUDA build's config looks for the toolkit (headers, nvcc, cudart).
if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(Torch CONFIG REQUIRED)

# Every torch library and include directory must come from the prefix.
set(_torch_items ${TORCH_INCLUDE_DIRS})
foreach(_lib IN LISTS TORCH_LIBRARIES)
  if(TARGET ${_lib})
    get_target_property(_type ${_lib} TYPE)
    if(NOT _type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(_loc ${_lib} IMPORTED_LOCATION)
      if(_loc)
        list(APPEND _torch_items ${_loc})
      endif()
    endif()
  elseif(IS_ABSOLUTE "${_lib}")
    list(APPEND _torch_items ${_lib})
  endif()
endforeach()
foreach(_item IN LISTS _torch_items)
  get_filename_component(_real ${_item} REALPATH)
  string(FIND "${_real}" "${FRAMESHARD_TORCH_PREFIX}/" _at)
  # CUDA runtime pieces come from the toolkit or the nvidia-* wheels.
  if(NOT _at EQUAL 0 AND NOT _real MATCHES "/cuda|/nvidia/")
    message(FATAL_ERROR "frameshard: expected every torch library and "
      "include directory inside ${FRAMESHARD_TORCH_PREFIX}, got ${_real} "
      "(another torch is on the search path; see cmake/FrameshardTorch.cmake)")
  endif()
endforeach()

execute_process(
  COMMAND ${CMAKE_COMMAND} -E cat ${FRAMESHARD_TORCH_PREFIX}/version.py
  OUTPUT_VARIABLE _version_py)
string(REGEX MATCH "__version__ = '([^']+)'" _ "${_version_py}")
set(FRAMESHARD_TORCH_VERSION "${CMAKE_MATCH_1}")
set(FRAMESHARD_TORCH_HAS_CUDA OFF)
if(EXISTS ${FRAMESHARD_TORCH_PREFIX}/lib/libtorch_cuda.so)
  set(FRAMESHARD_TORCH_HAS_CUDA ON)
endif()

# NCCL: ProcessGroupNCCL.hpp includes <nccl.h>; PyPI's torch takes both from
# the nvidia-nccl wheel next to it (site-packages/nvidia/nccl).
get_filename_component(_site ${FRAMESHARD_TORCH_PREFIX} DIRECTORY)
find_path(FRAMESHARD_NCCL_INCLUDE_DIR nccl.h
  HINTS ${_site}/nvidia/nccl/include ${_site}/nvidia/cu13/include NO_DEFAULT_PATH)
find_library(FRAMESHARD_NCCL_LIBRARY NAMES nccl libnccl.so.2
  HINTS ${_site}/nvidia/nccl/lib ${_site}/nvidia/cu13/lib NO_DEFAULT_PATH)
# Linking against libtorch_cuda.so resolves its own dependencies (NCCL,
# cudart, cuBLAS... from the nvidia-* wheels): give the linker their folders.
file(GLOB _nvidia_lib_dirs LIST_DIRECTORIES true ${_site}/nvidia/*/lib)
set(FRAMESHARD_TORCH_LINK_DIRS ${_nvidia_lib_dirs})
message(STATUS "frameshard: torch ${FRAMESHARD_TORCH_VERSION} from "
  "${FRAMESHARD_TORCH_PREFIX} (CUDA: ${FRAMESHARD_TORCH_HAS_CUDA}, NCCL: "
  "${FRAMESHARD_NCCL_LIBRARY})")
