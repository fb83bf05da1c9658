# What makes a build from scratch fast enough for a 2-core machine. Parsing libtorch's umbrella
# header <torch/torch.h> and writing full debug information for everything it instantiates is most
# of memseal's build: 30-45 s for each of the ~30 test, example and benchmark files that include it
# (-O2 -g), against 1-5 s for most of libmemseal's own files, which include narrow headers.
#
# - Precompiled headers: cmake/pch/torch.h is compiled once per build folder by a holder target
#   and reused (REUSE_FROM) by every test, example and benchmark of the same kind. GCC accepts a
#   precompiled header only under the flags it was made with, and executables are compiled
#   position-independent (-fPIE) unlike shared objects (-fPIC), hence one holder per kind.
# - Line tables only (-g1) for tests, examples and benchmarks: what stack traces, sanitizer
#   reports and memseal's own reports (file:line of each site) need, at about 60% of the cost of
#   -g. libmemseal itself keeps the build type's full debug information.
# - Unity builds of libmemseal and the CLI (src/CMakeLists.txt, src/cli/CMakeLists.txt).
option(MEMSEAL_PRECOMPILED_HEADERS "Precompile <torch/torch.h> once per build folder" ON)
option(MEMSEAL_UNITY_BUILD "Compile libmemseal's and the CLI's sources eight to a translation unit" ON)
option(MEMSEAL_FULL_DEBUG_INFO "Full debug information (-g) for tests, examples and benchmarks too"
       OFF)

set(MEMSEAL_PCH_DIR "${CMAKE_CURRENT_LIST_DIR}/pch")

# Line tables only for a target outside libmemseal (a test, an example, a benchmark).
function(memseal_line_tables_only target)
  if(NOT MEMSEAL_FULL_DEBUG_INFO)
    # After the build type's -g, so it wins; without -g (Release) it adds nothing.
    target_compile_options(${target} PRIVATE $<$<CONFIG:Debug,RelWithDebInfo>:-g1>)
  endif()
endfunction()

# The build settings of a target outside libmemseal that includes <torch/torch.h>: line tables
# only, and the precompiled header of its kind.
function(memseal_torch_program_settings target)
  memseal_line_tables_only(${target})
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
  get_target_property(target_type ${target} TYPE)
  if(target_type STREQUAL "EXECUTABLE")
    set(holder memseal_pch_torch_executable)
    if(NOT TARGET ${holder})
      add_executable(${holder} EXCLUDE_FROM_ALL "${MEMSEAL_PCH_DIR}/holder.cpp")
    endif()
  else()
    set(holder memseal_pch_torch_shared)
    if(NOT TARGET ${holder})
      add_library(${holder} OBJECT EXCLUDE_FROM_ALL "${MEMSEAL_PCH_DIR}/holder.cpp")
    endif()
  endif()
  get_target_property(holder_headers ${holder} PRECOMPILE_HEADERS)
  if(NOT holder_headers)
    target_link_libraries(${holder} PRIVATE torch nlohmann_json::nlohmann_json)
    target_precompile_headers(${holder} PRIVATE "${MEMSEAL_PCH_DIR}/torch.h")
    memseal_line_tables_only(${holder})
  endif()
  target_precompile_headers(${target} REUSE_FROM ${holder})
  # The precompiled header includes nlohmann/json, so its include path comes along.
  target_link_libraries(${target} PRIVATE nlohmann_json::nlohmann_json)
endfunction()
