# Finds libtorch 2.11. Order: an explicit Torch_DIR (cache or environment), else the prefix that
# `MEMSEAL_PYTHON -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'` reports.
set(MEMSEAL_TORCH_VERSION_REQUIRED "2.11")
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
                        "torch 2.11 into the environment first.")
  endif()
  list(PREPEND CMAKE_PREFIX_PATH "${memseal_torch_prefix}")
endif()
# Torch's config script prints noise about optional pieces (kineto) that memseal does not use.
find_package(Torch REQUIRED)
if(NOT Torch_VERSION VERSION_GREATER_EQUAL MEMSEAL_TORCH_VERSION_REQUIRED
   OR Torch_VERSION VERSION_GREATER_EQUAL "2.12")
  message(FATAL_ERROR "memseal: found libtorch ${Torch_VERSION} in ${Torch_DIR}; memseal is built "
                      "and tested against ${MEMSEAL_TORCH_VERSION_REQUIRED}.x")
endif()
get_filename_component(MEMSEAL_TORCH_LIBDIR "${TORCH_LIBRARY}" DIRECTORY)
message(STATUS "memseal: libtorch ${Torch_VERSION} from ${MEMSEAL_TORCH_LIBDIR}")

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
