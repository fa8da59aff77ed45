# yaml-cpp and nlohmann-json, the core's two C++ dependencies.
#
# Found as CMake packages first (Debian's libyaml-cpp-dev 0.7 and
# nlohmann-json3-dev; -DCMAKE_PREFIX_PATH for others). Where they are not
# installed -- a cluster node with torch, a compiler and CMake, building the
# Python package -- the Python environment's PyPI packages are used:
#   nlohmann-json==3.12.0   header-only; its headers in site-packages
#   cmeel-yaml-cpp==0.8.0   libyaml-cpp.so and its CMake config under
#                           site-packages/cmeel.prefix (also needed at run
#                           time: the extension's RPATH points there)
# A pip build (SKBUILD) prefers the environment's packages when they are
# installed, so the wheel uses what its own dependencies provide, and
# FRAMESHARD_PIP_DEPS=ON requires them (the hidden-Debian-packages test).
#
# Sets FRAMESHARD_YAML_TARGET (yaml-cpp or yaml-cpp::yaml-cpp, whichever the
# found package defines), FRAMESHARD_YAML_RPATH (the cmeel library directory,
# or empty) and the target nlohmann_json::nlohmann_json.

option(FRAMESHARD_PIP_DEPS
       "Require yaml-cpp and nlohmann-json from the Python environment's PyPI packages" OFF)

set(_fs_site "")
if(SKBUILD OR FRAMESHARD_PIP_DEPS)
  set(_fs_py "${Python_EXECUTABLE}")
  if(NOT _fs_py)
    set(_fs_py "${FRAMESHARD_PYTHON}")
  endif()
  if(NOT _fs_py AND EXISTS ${CMAKE_SOURCE_DIR}/.venv/bin/python)
    set(_fs_py ${CMAKE_SOURCE_DIR}/.venv/bin/python)
  endif()
  if(_fs_py)
    execute_process(
      COMMAND ${_fs_py} -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
      OUTPUT_VARIABLE _fs_site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
endif()

set(FRAMESHARD_YAML_RPATH "")
set(_fs_cmeel "${_fs_site}/cmeel.prefix")
set(_fs_nlohmann "${_fs_site}/nlohmann_json/include")
if(_fs_site AND EXISTS "${_fs_cmeel}/lib/cmake/yaml-cpp/yaml-cpp-config.cmake")
  find_package(yaml-cpp 0.7 REQUIRED CONFIG PATHS "${_fs_cmeel}/lib/cmake/yaml-cpp"
               NO_DEFAULT_PATH)
  set(FRAMESHARD_YAML_RPATH "${_fs_cmeel}/lib")
elseif(FRAMESHARD_PIP_DEPS)
  message(FATAL_ERROR "FRAMESHARD_PIP_DEPS=ON: expected the PyPI package "
    "cmeel-yaml-cpp in '${_fs_site}', got none (pip install cmeel-yaml-cpp==0.8.0)")
else()
  find_package(yaml-cpp QUIET)
  if(NOT yaml-cpp_FOUND)
    message(FATAL_ERROR "frameshard: expected yaml-cpp (Debian: libyaml-cpp-dev; "
      "or, for `pip install --no-build-isolation .`, the PyPI package "
      "cmeel-yaml-cpp==0.8.0 in the build's Python environment), got none")
  endif()
endif()
if(TARGET yaml-cpp::yaml-cpp)
  set(FRAMESHARD_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(FRAMESHARD_YAML_TARGET yaml-cpp)
endif()

if(_fs_site AND EXISTS "${_fs_nlohmann}/nlohmann/json.hpp")
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_fs_nlohmann}")
elseif(FRAMESHARD_PIP_DEPS)
  message(FATAL_ERROR "FRAMESHARD_PIP_DEPS=ON: expected the PyPI package "
    "nlohmann-json in '${_fs_site}', got none (pip install nlohmann-json==3.12.0)")
else()
  find_package(nlohmann_json 3 QUIET)
  if(NOT nlohmann_json_FOUND)
    message(FATAL_ERROR "frameshard: expected nlohmann-json 3 (Debian: "
      "nlohmann-json3-dev; or, for `pip install --no-build-isolation .`, the "
      "PyPI package nlohmann-json==3.12.0 in the build's Python environment), got none")
  endif()
endif()
if(TARGET nlohmann_json::nlohmann_json AND _fs_site AND
   EXISTS "${_fs_nlohmann}/nlohmann/json.hpp")
  set(_fs_json_from "the PyPI package in ${_fs_site}")
else()
  set(_fs_json_from "the CMake package ${nlohmann_json_DIR}")
endif()
set(_fs_yaml_from "the CMake package ${yaml-cpp_DIR}")
message(STATUS "frameshard: yaml-cpp ${yaml-cpp_VERSION} from ${_fs_yaml_from}; "
               "nlohmann-json from ${_fs_json_from}")
