# What makes a build from scratch fast enough for a 2-core machine. Parsing libtorch's umbrella
# header <torch/torch.h> and writing debug information for everything libtorch's templates
# instantiate is most of memseal's build: 30-45 s for each of the ~30 test, example and benchmark
# files that include it (-O2 -g), and about 40 s for each of libmemseal's unity files.
#
# - Line tables only (-g1) wherever the build type asks for debug information: what stack traces,
#   sanitizer reports and memseal's own reports (file:line of each site) need, at about half the
#   cost of -g. MEMSEAL_FULL_DEBUG_INFO=ON keeps the build type's -g (for stepping through
#   memseal in a debugger).
# - Precompiled headers: cmake/pch/torch.h is compiled once per build folder by a holder target
#   and reused (REUSE_FROM) by every test, example and benchmark that includes <torch/torch.h>.
# - Unity builds of libmemseal, the CLI (src/CMakeLists.txt, src/cli/CMakeLists.txt) and the tests
#   (tests/CMakeLists.txt: one integration test program).
option(MEMSEAL_PRECOMPILED_HEADERS "Precompile <torch/torch.h> once per build folder" ON)
option(MEMSEAL_UNITY_BUILD
       "Compile libmemseal, the CLI and the tests several files to a translation unit" ON)
option(MEMSEAL_FULL_DEBUG_INFO "Full debug information (-g) instead of line tables only (-g1)" OFF)

set(MEMSEAL_PCH_DIR "${CMAKE_CURRENT_LIST_DIR}/pch")

if(NOT MEMSEAL_FULL_DEBUG_INFO)
  # Compile options come after the build type's -g on the command line, so -g1 wins; without -g
  # (Release) it adds nothing. C++ only: nvcc has no -g1.
  add_compile_options("$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Debug,RelWithDebInfo>>:-g1>")
endif()

# The build settings of a target outside libmemseal that includes <torch/torch.h>: the
# precompiled header.
function(memseal_torch_program_settings target)
  if(NOT MEMSEAL_PRECOMPILED_HEADERS)
    return()
  endif()
  # Loading the precompiled header costs ~6 s, more than a file without <torch/torch.h> takes.
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  set(includes_torch OFF)
  foreach(source IN LISTS sources)
    cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY "${source_dir}")
    file(STRINGS "${source}" torch_includes REGEX "^#include <torch/torch.h>")
    if(torch_includes)
      set(includes_torch ON)
    endif()
  endforeach()
  if(NOT includes_torch)
    return()
  endif()
  # One precompiled header for every kind of target: GCC accepts it only under the flags it was
  # made with, and it is made position-independent for shared objects (-fPIC), so executables that
  # reuse it are compiled -fPIC too (after CMake's -fPIE, which it overrides); they link as PIE all
  # the same.
  set(holder memseal_pch_torch)
  if(NOT TARGET ${holder})
    add_library(${holder} OBJECT EXCLUDE_FROM_ALL "${MEMSEAL_PCH_DIR}/holder.cpp")
    target_link_libraries(${holder} PRIVATE torch nlohmann_json::nlohmann_json)
    target_precompile_headers(${holder} PRIVATE "${MEMSEAL_PCH_DIR}/torch.h")
  endif()
  get_target_property(target_type ${target} TYPE)
  if(target_type STREQUAL "EXECUTABLE")
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
  target_precompile_headers(${target} REUSE_FROM ${holder})
  # The precompiled header includes nlohmann/json, so its include path comes along.
  target_link_libraries(${target} PRIVATE nlohmann_json::nlohmann_json)
endfunction()
