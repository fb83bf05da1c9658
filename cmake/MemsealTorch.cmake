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
