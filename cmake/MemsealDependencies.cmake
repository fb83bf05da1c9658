# Third-party libraries: the system's copy first, the vendored header-only copy otherwise (the GPU
# machine has no network, so everything beyond torch must travel with the tree or be optional).
find_package(nlohmann_json 3.11 QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json INTERFACE)
  target_include_directories(nlohmann_json SYSTEM INTERFACE
                             "${PROJECT_SOURCE_DIR}/third_party/nlohmann_json/include")
  add_library(nlohmann_json::nlohmann_json ALIAS nlohmann_json)
endif()
find_package(CLI11 2 QUIET)
if(NOT TARGET CLI11::CLI11)
  add_library(CLI11 INTERFACE)
  target_include_directories(CLI11 SYSTEM INTERFACE "${PROJECT_SOURCE_DIR}/third_party/cli11/include")
  add_library(CLI11::CLI11 ALIAS CLI11)
endif()
# cpp-httplib (the page `memseal run --live` serves): always the vendored header, a newer release than
# Debian's, which packages it as a compiled library.
add_library(memseal_httplib INTERFACE)
target_include_directories(memseal_httplib SYSTEM INTERFACE
                           "${PROJECT_SOURCE_DIR}/third_party/cpp_httplib/include")
find_package(Threads REQUIRED)
# GoogleTest: the system's, else a source tree (MEMSEAL_GOOGLETEST_SOURCE, by default the folder
# .carried/googletest that DEVELOPERS.md copies from Debian's /usr/src/googletest and carries to the
# GPU machine, which has no GoogleTest and no network).
set(MEMSEAL_GOOGLETEST_SOURCE "${PROJECT_SOURCE_DIR}/.carried/googletest"
    CACHE PATH "GoogleTest sources to build when no installed GoogleTest is found")
if(MEMSEAL_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND AND EXISTS "${MEMSEAL_GOOGLETEST_SOURCE}/CMakeLists.txt")
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory("${MEMSEAL_GOOGLETEST_SOURCE}" "${PROJECT_BINARY_DIR}/googletest" EXCLUDE_FROM_ALL)
    if(NOT TARGET GTest::gtest_main)
      add_library(GTest::gtest_main ALIAS gtest_main)
    endif()
    message(STATUS "memseal: GoogleTest built from ${MEMSEAL_GOOGLETEST_SOURCE}")
  elseif(NOT GTest_FOUND)
    message(WARNING "memseal: GoogleTest not found, tests are not built")
    set(MEMSEAL_TESTS OFF)
  endif()
endif()
# Google Benchmark serves the planner's micro-benchmark only; the other benchmarks are plain
# programs and are built without it.
if(MEMSEAL_BENCHMARKS)
  find_package(benchmark QUIET)
  if(NOT benchmark_FOUND)
    message(STATUS "memseal: Google Benchmark not found, the planner's micro-benchmark is not built")
  endif()
endif()
