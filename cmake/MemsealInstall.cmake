# `cmake --install` puts the public headers, libmemseal, the memseal command and a package config
# under the prefix, so that `find_package(memseal)` gives consumers memseal::memseal (which carries
# its torch dependency: the config finds Torch, at the libtorch memseal was built with unless the
# consumer says otherwise).
include(CMakePackageConfigHelpers)

install(TARGETS memseal EXPORT memsealTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS memseal_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/memseal" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT memsealTargets NAMESPACE memseal::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memseal)

get_filename_component(MEMSEAL_BUILT_WITH_TORCH_DIR "${Torch_DIR}" ABSOLUTE)
configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/memsealConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/memsealConfig.cmake"
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memseal)
write_basic_package_version_file("${PROJECT_BINARY_DIR}/memsealConfigVersion.cmake"
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/memsealConfig.cmake"
              "${PROJECT_BINARY_DIR}/memsealConfigVersion.cmake"
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/memseal)
