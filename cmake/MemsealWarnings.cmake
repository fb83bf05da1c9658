# Warnings and sanitizers. Our own code builds with -Wall -Wextra -Werror; libtorch's headers are
# included as system headers so their warnings stay theirs.
function(memseal_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
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
