# Warnings and sanitizers. Our own code builds with -Wall -Wextra, and -Werror unless MEMSEAL_WERROR
# is off (the wheel turns it off: a user's newer compiler may warn of things ours does not);
# libtorch's headers are included as system headers so their warnings stay theirs.
function(memseal_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(MEMSEAL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  # GCC 13 and later warn of a "possibly dangling reference" wherever a function returning a
  # reference is given a temporary, even one it does not return (a JSON field looked up with a
  # std::string message; an element of a c10::List while iterating a temporary's elements, which
  # IValue keeps alive).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
    target_compile_options(${target} PRIVATE -Wno-dangling-reference)
  endif()
endfunction()

if(MEMSEAL_SANITIZE)
  set(memseal_sanitize_flags "-fsanitize=${MEMSEAL_SANITIZE}" -fno-omit-frame-pointer)
  if(MEMSEAL_SANITIZE MATCHES "undefined")
    # libtorch is not built with -fsanitize=vptr, so its type info would trip false positives.
    list(APPEND memseal_sanitize_flags -fno-sanitize=vptr -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${memseal_sanitize_flags})
  add_link_options(${memseal_sanitize_flags})
  if(MEMSEAL_SANITIZE MATCHES "address")
    add_compile_definitions(MEMSEAL_ASAN=1)
  endif()
  if(MEMSEAL_SANITIZE MATCHES "thread")
    add_compile_definitions(MEMSEAL_TSAN=1)
  endif()
endif()

# libtorch's include directories as SYSTEM, so -Werror never fires on its headers.
foreach(memseal_torch_target torch torch_cpu c10)
  if(TARGET ${memseal_torch_target})
    get_target_property(memseal_dirs ${memseal_torch_target} INTERFACE_INCLUDE_DIRECTORIES)
    if(memseal_dirs)
      set_target_properties(${memseal_torch_target} PROPERTIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES
                                                               "${memseal_dirs}")
    endif()
  endif()
endforeach()
