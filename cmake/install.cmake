# cmake/install.cmake — `cmake --install` and `cpack -G DEB`: one variant per install.
#
# What an install holds (GNUInstallDirs, so PREFIX and DESTDIR work as usual):
#   lib/libkvshare.so.1 (+ the .so name link), include/kvshare.h, bin/kvshare
#   lib/pkgconfig/kvshare.pc                          pkg-config --cflags --libs kvshare
#   lib/cmake/kvshare/kvshareConfig*.cmake            find_package(kvshare) -> kvshare::kvshare
# Both variants have the same SONAME, header and ABI, so an install is one of them:
# KVS_INSTALL_VARIANT (default: the first built, kernel when both are) is what a plain
# `cmake --install` and the Debian package install; each built variant is also its own
# component (`cmake --install build --component plain`).  The CLI is installed with
# either (it is linked by SONAME and finds the library through RUNPATH
# $ORIGIN/../lib, so the tree can be moved).  The CMake package is written by hand (an
# imported target of the installed file): the shared library's static module archives
# are linked into it whole and have nothing to export.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

list(GET kvs_variants 0 kvs_default_variant)
set(KVS_INSTALL_VARIANT "${kvs_default_variant}" CACHE STRING
    "the variant `cmake --install` and the Debian package install (kernel or plain)")
if(NOT KVS_INSTALL_VARIANT IN_LIST kvs_variants)
  message(FATAL_ERROR "KVS_INSTALL_VARIANT=${KVS_INSTALL_VARIANT} is not built (KVS_VARIANT=${KVS_VARIANT})")
endif()

set_target_properties(kvshare_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")

# Both files find the prefix relative to where they lie (--prefix and DESTDIR are
# install-time choices, and an installed tree may be moved).
file(RELATIVE_PATH kvs_pc_up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
file(RELATIVE_PATH kvs_cmake_up "/p/${CMAKE_INSTALL_LIBDIR}/cmake/kvshare" "/p")
set(kvs_pc_libdir "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
set(kvs_pc_includedir "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
write_basic_package_version_file(${CMAKE_BINARY_DIR}/install/kvshareConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)

foreach(v IN LISTS kvs_variants)
  if(v STREQUAL KVS_INSTALL_VARIANT)
    set(kvs_exclude "")
  else()
    set(kvs_exclude EXCLUDE_FROM_ALL)
  endif()
  set(KVS_PC_VARIANT ${v})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/kvshare.pc.in ${CMAKE_BINARY_DIR}/install/${v}/kvshare.pc @ONLY)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/kvshareConfig.cmake.in
                 ${CMAKE_BINARY_DIR}/install/${v}/kvshareConfig.cmake @ONLY)
  install(TARGETS kvshare_${v} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ${v} ${kvs_exclude})
  install(TARGETS kvshare_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ${v} ${kvs_exclude})
  install(FILES ${PROJECT_SOURCE_DIR}/include/kvshare.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          COMPONENT ${v} ${kvs_exclude})
  install(FILES ${CMAKE_BINARY_DIR}/install/${v}/kvshare.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT ${v} ${kvs_exclude})
  install(FILES ${CMAKE_BINARY_DIR}/install/${v}/kvshareConfig.cmake
                ${CMAKE_BINARY_DIR}/install/kvshareConfigVersion.cmake
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvshare COMPONENT ${v} ${kvs_exclude})
endforeach()

# cpack -G DEB (run in the build dir): the KVS_INSTALL_VARIANT install as a Debian
# package; its runtime dependencies are Debian 12's packages of what it links.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kvshare)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "kvshare developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "shared host-memory KV-cache tier for the inference ranks of one node (${KVS_INSTALL_VARIANT} build)")
set(CPACK_DEB_COMPONENT_INSTALL OFF)
set(CPACK_COMPONENTS_ALL ${KVS_INSTALL_VARIANT})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
if(KVS_INSTALL_VARIANT STREQUAL "kernel")
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6, liburing2, libnuma1, libhugetlbfs0, libjansson4, libhiredis0.14")
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6, libjansson4, libhiredis0.14")
endif()
include(CPack)
