# Finds libtorch, a release from 2.9 up to 2.15 (each build is tied to the one it finds: the ABI of
# libtorch's internals differs between releases). Order: an explicit Torch_DIR (cache or
# environment), else the prefix that
# `MEMSEAL_PYTHON -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'` reports.
# scripts/torch_matrix.sh builds and tests memseal against each release of the range.
set(MEMSEAL_TORCH_VERSION_MIN "2.9")  # the oldest release memseal builds against
set(MEMSEAL_TORCH_VERSION_END "2.16")  # the first release it does not (not yet tried)
# A build folder whose torch came from a Python follows that Python's torch (pip reuses one build
# folder, build/python, whichever environment it installs into): the Python is asked again, and
# when its torch is another, what CMake cached of the old one is forgotten below.
set(memseal_previous_torch_dir "")
if(Torch_DIR AND NOT DEFINED ENV{Torch_DIR}
   AND Torch_DIR STREQUAL "$CACHE{MEMSEAL_TORCH_DIR_FROM_PYTHON}")
  set(memseal_previous_torch_dir "${Torch_DIR}")
  unset(Torch_DIR CACHE)
  unset(Torch_DIR)
endif()
if(NOT Torch_DIR AND DEFINED ENV{Torch_DIR})
  set(Torch_DIR "$ENV{Torch_DIR}")
endif()
if(NOT Torch_DIR)
  if(NOT MEMSEAL_PYTHON AND Python_EXECUTABLE)
    set(MEMSEAL_PYTHON "${Python_EXECUTABLE}")  # pip's build (scikit-build-core) names it
  endif()
  if(NOT MEMSEAL_PYTHON)
    find_package(Python3 COMPONENTS Interpreter REQUIRED)
    set(MEMSEAL_PYTHON "${Python3_EXECUTABLE}")
  endif()
  execute_process(
    COMMAND "${MEMSEAL_PYTHON}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE memseal_torch_prefix
    ERROR_VARIABLE memseal_torch_error
    RESULT_VARIABLE memseal_torch_result
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT memseal_torch_result EQUAL 0)
    # pip's isolated build environment hides the environment's own packages from `import torch`,
    # but the interpreter still names its site-packages: take torch's CMake files from there, so
    # a plain `pip install .` builds against the torch already installed, without fetching another.
    execute_process(
      COMMAND "${MEMSEAL_PYTHON}" -c
              "import sysconfig; p = sysconfig.get_paths(); print(p['purelib']); print(p['platlib'])"
      OUTPUT_VARIABLE memseal_site_dirs
      OUTPUT_STRIP_TRAILING_WHITESPACE)
    string(REPLACE "\n" ";" memseal_site_dirs "${memseal_site_dirs}")
    foreach(site_dir IN LISTS memseal_site_dirs)
      if(EXISTS "${site_dir}/torch/share/cmake/Torch/TorchConfig.cmake")
        set(memseal_torch_prefix "${site_dir}/torch/share/cmake")
        set(memseal_torch_result 0)
        break()
      endif()
    endforeach()
  endif()
  if(NOT memseal_torch_result EQUAL 0)
    message(FATAL_ERROR "memseal: '${MEMSEAL_PYTHON}' cannot import torch (${memseal_torch_error}). "
                        "Run scripts/bootstrap.sh, or set PYTHON or Torch_DIR; under pip, install "
                        "torch (>=${MEMSEAL_TORCH_VERSION_MIN},<${MEMSEAL_TORCH_VERSION_END}) into "
                        "the environment first.")
  endif()
  list(PREPEND CMAKE_PREFIX_PATH "${memseal_torch_prefix}")
  if(memseal_previous_torch_dir AND NOT memseal_previous_torch_dir STREQUAL "${memseal_torch_prefix}/Torch")
    # The torch package (site-packages/torch) the cached paths point into.
    get_filename_component(memseal_old_torch "${memseal_previous_torch_dir}/../../.." ABSOLUTE)
    message(STATUS "memseal: ${MEMSEAL_PYTHON} imports another torch than this build folder was "
                   "configured with (${memseal_old_torch}); forgetting the old one's cached paths")
    get_cmake_property(memseal_cached CACHE_VARIABLES)
    foreach(variable IN LISTS memseal_cached)
      string(FIND "$CACHE{${variable}}" "${memseal_old_torch}/" memseal_at)
      if(NOT memseal_at EQUAL -1)
        unset(${variable} CACHE)
      endif()
    endforeach()
  endif()
  set(memseal_torch_from_python ON)
endif()
# Torch's config script prints noise about optional pieces (kineto) that memseal does not use.
find_package(Torch REQUIRED)
if(NOT Torch_VERSION VERSION_GREATER_EQUAL MEMSEAL_TORCH_VERSION_MIN
   OR Torch_VERSION VERSION_GREATER_EQUAL MEMSEAL_TORCH_VERSION_END)
  message(FATAL_ERROR "memseal: found libtorch ${Torch_VERSION} in ${Torch_DIR}; memseal builds "
                      "against libtorch ${MEMSEAL_TORCH_VERSION_MIN} up to (not including) "
                      "${MEMSEAL_TORCH_VERSION_END}. Point PYTHON (a Python whose torch is in that "
                      "range) or Torch_DIR at another libtorch.")
endif()
if(memseal_torch_from_python)
  set(MEMSEAL_TORCH_DIR_FROM_PYTHON "${Torch_DIR}" CACHE INTERNAL "Torch_DIR, as found through MEMSEAL_PYTHON")
else()
  set(MEMSEAL_TORCH_DIR_FROM_PYTHON "" CACHE INTERNAL "Torch_DIR, as found through MEMSEAL_PYTHON")
endif()
# libtorch 2.12 and newer are C++20 code: 2.15's package asks its consumers for C++20 (its target's
# compile features), 2.12 to 2.14 set it for their own build only, so memseal says it for them all.
if(Torch_VERSION VERSION_GREATER_EQUAL "2.12")
  set(CMAKE_CXX_STANDARD 20)
endif()
get_filename_component(MEMSEAL_TORCH_LIBDIR "${TORCH_LIBRARY}" DIRECTORY)
message(STATUS "memseal: libtorch ${Torch_VERSION} from ${MEMSEAL_TORCH_LIBDIR}")
# memseal's CUDA code links the CUDA toolkit's runtime: one of another major version than torch's
# (torch 2.9 and 2.10 on PyPI are CUDA 12 builds, 2.11 and newer CUDA 13 ones) would be a second
# CUDA runtime in the process. Builds and CPU tests work; a GPU needs the toolkit torch was built
# with. The torch package says its CUDA in version.py (a libtorch archive has none).
set(memseal_torch_cuda "")
if(EXISTS "${MEMSEAL_TORCH_LIBDIR}/../version.py")
  file(STRINGS "${MEMSEAL_TORCH_LIBDIR}/../version.py" memseal_torch_cuda REGEX "^cuda")
endif()
if(TARGET c10_cuda AND CUDAToolkit_VERSION_MAJOR AND memseal_torch_cuda MATCHES "'([0-9]+)\\.")
  if(NOT CMAKE_MATCH_1 STREQUAL CUDAToolkit_VERSION_MAJOR)
    message(WARNING "memseal: libtorch ${Torch_VERSION} was built with CUDA ${CMAKE_MATCH_1}, but the "
                    "CUDA toolkit found is ${CUDAToolkit_VERSION}: memseal would load both CUDA "
                    "runtimes. Fine without a GPU; with one, point CUDAToolkit_ROOT (or CUDA_HOME) "
                    "at a CUDA ${CMAKE_MATCH_1} toolkit.")
  endif()
endif()

# The CUDA runtime of a torch wheel lives beside torch, in site-packages/nvidia/<package>/lib, where
# only libtorch_cuda's own RUNPATH finds it. memseal's CUDA code calls it through libtorch's inline
# headers, and the loader looks for memseal's dependencies before libtorch_cuda has loaded it, so
# memseal's binaries must find that folder themselves (or they would take another CUDA runtime
# installed on the system, or none).
file(GLOB memseal_cudart_files "${MEMSEAL_TORCH_LIBDIR}/../../nvidia/*/lib/libcudart.so.*")
set(MEMSEAL_TORCH_RUNTIME_DIRS "${MEMSEAL_TORCH_LIBDIR}")
set(MEMSEAL_WHEEL_RUNTIME_SUBDIRS "torch/lib")  # relative to site-packages
foreach(cudart IN LISTS memseal_cudart_files)
  get_filename_component(cudart_dir "${cudart}" DIRECTORY)
  get_filename_component(cudart_dir "${cudart_dir}" REALPATH)
  get_filename_component(site_packages "${MEMSEAL_TORCH_LIBDIR}/../.." REALPATH)
  file(RELATIVE_PATH cudart_subdir "${site_packages}" "${cudart_dir}")
  list(APPEND MEMSEAL_TORCH_RUNTIME_DIRS "${cudart_dir}")
  list(APPEND MEMSEAL_WHEEL_RUNTIME_SUBDIRS "${cudart_subdir}")
endforeach()
list(REMOVE_DUPLICATES MEMSEAL_TORCH_RUNTIME_DIRS)
list(REMOVE_DUPLICATES MEMSEAL_WHEEL_RUNTIME_SUBDIRS)
# Linking a program, the linker checks the libraries that libtorch_cuda needs (NCCL, cuDNN, ...),
# and looks in the program's own RPATH (which holds the CUDA toolkit's lib folder) before the wheel's
# folders that libtorch_cuda's RPATH names: a toolkit's older libnccl.so.2 then lacks what a newer
# libtorch_cuda calls (torch 2.15's ncclCommGrow, with CUDA 13.0's NCCL). The wheel's come first.
file(GLOB memseal_nvidia_lib_dirs LIST_DIRECTORIES true "${MEMSEAL_TORCH_LIBDIR}/../../nvidia/*/lib")
foreach(nvidia_lib_dir IN LISTS memseal_nvidia_lib_dirs)
  if(IS_DIRECTORY "${nvidia_lib_dir}")
    get_filename_component(nvidia_lib_dir "${nvidia_lib_dir}" REALPATH)
    set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS "LINKER:-rpath-link,${nvidia_lib_dir}")
  endif()
endforeach()

# The RUNPATH of a file installed `levels` folders below site-packages in the wheel
# (memseal/_memseal*.so: 1, memseal/bin/memseal: 2, memseal/lib/memseal/*.so: 3), plus `extra`.
function(memseal_wheel_rpath target levels)
  string(REPEAT "/.." ${levels} up)
  set(rpath ${ARGN})
  foreach(subdir IN LISTS MEMSEAL_WHEEL_RUNTIME_SUBDIRS)
    list(APPEND rpath "$ORIGIN${up}/${subdir}")
  endforeach()
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "${rpath}")
endfunction()
