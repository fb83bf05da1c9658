# One C++ runtime per process. memseal's shared library, its Python module and what `memseal run`
# injects are loaded into processes where libtorch has already loaded the shared libstdc++. A
# toolchain that links libstdc++ statically (a g++ wrapped with -static-libstdc++, so that what it
# builds runs anywhere) gives each of them a copy of its own, whose exported symbols the shared one
# then partly interposes: a stream built by one copy looks its locale facets up with the other
# copy's facet numbers, and the first number written to a std::ostringstream jumps into the wrong
# facet and crashes (seen: LeakReport::toText() in the Python module, on a machine whose g++ did
# this). The probe links a small shared object the way every target is linked; when libstdc++'s code
# ends up inside it, every target links the shared libstdc++ by name, ahead of the toolchain's static
# one, so nothing is taken from the archive (--as-needed: a target that uses no C++ runtime, the
# preload shim, still needs none).
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU" OR NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
  return()
endif()

set(MEMSEAL_SHARED_LIBSTDCXX_LINK "-Wl,--push-state,--as-needed,-l:libstdc++.so.6,--pop-state")

# Sets OUT to TRUE when a shared object linked with the compiler and EXTRA_LINK_FLAGS holds
# libstdc++'s own code (std::locale's), FALSE when it does not, and "unknown" when the probe failed.
function(memseal_links_libstdcxx_statically out extra_link_flags)
  set(probe_dir "${CMAKE_BINARY_DIR}/CMakeFiles/memseal_libstdcxx_probe")
  file(WRITE "${probe_dir}/probe.cpp"
       "#include <sstream>\n#include <string>\n"
       "std::string memsealProbe(unsigned long n) { std::ostringstream out; out << n; return out.str(); }\n")
  separate_arguments(flags UNIX_COMMAND "${CMAKE_CXX_FLAGS} ${CMAKE_SHARED_LINKER_FLAGS}")
  execute_process(COMMAND "${CMAKE_CXX_COMPILER}" ${flags} -shared -fPIC probe.cpp -o probe.so
                          ${extra_link_flags}
                  WORKING_DIRECTORY "${probe_dir}" RESULT_VARIABLE linked OUTPUT_QUIET ERROR_QUIET)
  if(NOT linked EQUAL 0 OR NOT CMAKE_NM)
    set(${out} "unknown" PARENT_SCOPE)
    return()
  endif()
  execute_process(COMMAND "${CMAKE_NM}" --defined-only probe.so WORKING_DIRECTORY "${probe_dir}"
                  OUTPUT_VARIABLE symbols RESULT_VARIABLE listed ERROR_QUIET)
  if(NOT listed EQUAL 0)
    set(${out} "unknown" PARENT_SCOPE)
  elseif(symbols MATCHES "_ZNSt6locale7classicEv")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

memseal_links_libstdcxx_statically(memseal_static_libstdcxx "")
if(memseal_static_libstdcxx STREQUAL "TRUE")
  memseal_links_libstdcxx_statically(memseal_static_after_fix "${MEMSEAL_SHARED_LIBSTDCXX_LINK}")
  if(memseal_static_after_fix STREQUAL "FALSE")
    message(STATUS "memseal: ${CMAKE_CXX_COMPILER} links libstdc++ statically; linking the shared "
                   "libstdc++.so.6 instead, the one libtorch uses")
    link_libraries("${MEMSEAL_SHARED_LIBSTDCXX_LINK}")
  else()
    message(WARNING "memseal: ${CMAKE_CXX_COMPILER} links libstdc++ statically and linking "
                    "libstdc++.so.6 by name did not stop it; the Python module will crash when it "
                    "formats text. Use a compiler that links the shared libstdc++.")
  endif()
endif()
