# cmake/install.cmake — `cmake --install` and the Debian packages: one variant per install.
#
# What an install holds (GNUInstallDirs, so PREFIX and DESTDIR work as usual; LIBDIR is
# lib/<multiarch>, e.g. lib/x86_64-linux-gnu, when the prefix is /usr, else lib):
#   LIBDIR/libkvshare.so.1 (+ the .so name link), include/kvshare.h, bin/kvshare
#   LIBDIR/pkgconfig/kvshare.pc                       pkg-config --cflags --libs kvshare
#   LIBDIR/cmake/kvshare/kvshareConfig*.cmake         find_package(kvshare) -> kvshare::kvshare
# Both variants have the same SONAME, header and ABI, so an install is one of them:
# KVS_INSTALL_VARIANT (default: the first built, kernel when both are) is what a plain
# `cmake --install` and the Debian packages install, as one component per package:
#   lib  libkvshare1     the library: libkvshare.so.1 and the file it names
#   dev  libkvshare-dev  kvshare.h, the libkvshare.so link, kvshare.pc, the CMake package
#   cli  kvshare         bin/kvshare
# Each built variant is also a component holding all of it (`cmake --install build
# --component plain`).  The CLI is linked by SONAME; installed outside the linker's
# own directories it finds the library through RUNPATH $ORIGIN/../LIBDIR, so the tree
# can be moved (under /usr it has none: Debian forbids it, ld.so finds the library).
# The CMake package is written by hand (an imported target of the installed file):
# the shared library's static module archives are linked into it whole and have
# nothing to export.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

list(GET kvs_variants 0 kvs_default_variant)
set(KVS_INSTALL_VARIANT "${kvs_default_variant}" CACHE STRING
    "the variant `cmake --install` and the Debian package install (kernel or plain)")
if(NOT KVS_INSTALL_VARIANT IN_LIST kvs_variants)
  message(FATAL_ERROR "KVS_INSTALL_VARIANT=${KVS_INSTALL_VARIANT} is not built (KVS_VARIANT=${KVS_VARIANT})")
endif()

if(NOT CMAKE_INSTALL_FULL_LIBDIR IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
  set_target_properties(kvshare_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
endif()

# Both files find the prefix relative to where they lie (--prefix and DESTDIR are
# install-time choices, and an installed tree may be moved).
file(RELATIVE_PATH kvs_pc_up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
file(RELATIVE_PATH kvs_cmake_up "/p/${CMAKE_INSTALL_LIBDIR}/cmake/kvshare" "/p")
set(kvs_pc_libdir "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
set(kvs_pc_includedir "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
write_basic_package_version_file(${CMAKE_BINARY_DIR}/install/kvshareConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)

# Every variant as its own component ($v, EXCLUDE_FROM_ALL); the install variant also
# as lib/dev/cli, the components a plain `cmake --install` and cpack install.
foreach(v IN LISTS kvs_variants)
  set(KVS_PC_VARIANT ${v})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/kvshare.pc.in ${CMAKE_BINARY_DIR}/install/${v}/kvshare.pc @ONLY)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/kvshareConfig.cmake.in
                 ${CMAKE_BINARY_DIR}/install/${v}/kvshareConfig.cmake @ONLY)
  set(kvs_sets "${v};${v};${v};EXCLUDE_FROM_ALL")
  if(v STREQUAL KVS_INSTALL_VARIANT)
    list(APPEND kvs_sets lib dev cli "")
  endif()
  while(kvs_sets)
    list(POP_FRONT kvs_sets c_lib c_dev c_cli c_exclude)
    install(TARGETS kvshare_${v} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
            COMPONENT ${c_lib} NAMELINK_COMPONENT ${c_dev} ${c_exclude})
    install(TARGETS kvshare_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ${c_cli} ${c_exclude})
    install(FILES ${PROJECT_SOURCE_DIR}/include/kvshare.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
            COMPONENT ${c_dev} ${c_exclude})
    install(FILES ${CMAKE_BINARY_DIR}/install/${v}/kvshare.pc
            DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT ${c_dev} ${c_exclude})
    install(FILES ${CMAKE_BINARY_DIR}/install/${v}/kvshareConfig.cmake
                  ${CMAKE_BINARY_DIR}/install/kvshareConfigVersion.cmake
            DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvshare COMPONENT ${c_dev} ${c_exclude})
  endwhile()
endforeach()

# The Debian packages of the install variant.  `make deb` (cmake/deb.sh) builds them
# from a build of their own: prefix /usr, KVS_TESTS=OFF (only the library and the CLI
# are compiled first), the dpkg-buildflags hardening flags.  `cpack -G DEB` works in
# any build configured with prefix /usr (after building all it holds); in any other
# it stops at once (cmake/deb/cpack.cmake), as Debian packages live under /usr.
#   libkvshare1     libs      the library, stripped; a shlibs file and a `triggers`
#                             file (activate-noawait ldconfig)
#   libkvshare-dev  libdevel  Depends libkvshare1 (= version)
#   kvshare         utils     the CLI, Depends libkvshare1 (= version).  Its own package,
#                             not in libkvshare1: a library package holds the library
#                             only (Debian policy 8.2), so libkvshare1 and a later
#                             libkvshare2 can be installed side by side, and a program
#                             linking the library does not pull in the CLI or jansson
#   <each>-dbgsym   debug     the debug info split out of the library and the CLI
#                             (.ddeb, /usr/lib/debug/.build-id/)
# Each package's /usr/share/doc/<package>/ holds copyright and changelog.Debian.gz
# (components' EXCLUDE_FROM_ALL rules: not in a plain `cmake --install`).  The other
# Depends come from dpkg-shlibdeps (a fixed list of Debian 12's packages without it).
set(KVS_DEB_MAINTAINER "kvshare maintainers <kvshare@example.org>" CACHE STRING
    "the Maintainer of the Debian packages (\"Name <address>\")")
set(kvs_deb_release 1)
set(kvs_deb_dir ${CMAKE_BINARY_DIR}/install/deb)
string(TIMESTAMP kvs_deb_date "%a, %d %b %Y %H:%M:%S +0000" UTC) # SOURCE_DATE_EPOCH if set
file(WRITE ${kvs_deb_dir}/changelog.Debian
"kvshare (${PROJECT_VERSION}-${kvs_deb_release}) unstable; urgency=medium

  * kvshare ${PROJECT_VERSION}, the ${KVS_INSTALL_VARIANT} build, packaged by
    cmake/install.cmake.

 -- ${KVS_DEB_MAINTAINER}  ${kvs_deb_date}
")
execute_process(COMMAND gzip -9nf ${kvs_deb_dir}/changelog.Debian RESULT_VARIABLE kvs_gzip_rc)
if(NOT kvs_gzip_rc EQUAL 0)
  message(WARNING "gzip failed: the Debian packages will lack changelog.Debian.gz")
endif()
file(WRITE ${kvs_deb_dir}/triggers "activate-noawait ldconfig\n")
foreach(c_pkg "lib;libkvshare1" "dev;libkvshare-dev" "cli;kvshare")
  list(GET c_pkg 0 c)
  list(GET c_pkg 1 pkg)
  install(FILES ${PROJECT_SOURCE_DIR}/cmake/deb/copyright ${kvs_deb_dir}/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${pkg} COMPONENT ${c} EXCLUDE_FROM_ALL)
  string(TOUPPER ${c} c)
  set(CPACK_DEBIAN_${c}_PACKAGE_NAME ${pkg})
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_SOURCE_DIR}/cmake/deb/cpack.cmake)
set(CPACK_KVS_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_PACKAGE_NAME kvshare)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${KVS_DEB_MAINTAINER}")
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL lib dev cli)
set(CPACK_COMPONENT_DEV_DEPENDS lib)
set(CPACK_COMPONENT_CLI_DEPENDS lib)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # <package>_<version>-<release>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE ${kvs_deb_release})
set(CPACK_DEBIAN_PACKAGE_SOURCE kvshare)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA ${kvs_deb_dir}/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION utils)
set(kvs_deb_about "kvshare is one shared host-memory KV-cache tier for the inference ranks
of a node: ranks load and dump fixed-size KV blocks through a cache in shared
memory, backed by files or Redis.")
set(CPACK_DEBIAN_LIB_DESCRIPTION "shared host-memory KV-cache tier for inference ranks
${kvs_deb_about}
This package holds the shared library, libkvshare.so.1 (the ${KVS_INSTALL_VARIANT} build).")
set(CPACK_DEBIAN_DEV_DESCRIPTION "shared host-memory KV-cache tier for inference ranks (development files)
${kvs_deb_about}
This package holds the header kvshare.h, the pkg-config file and the CMake
package (find_package(kvshare) gives kvshare::kvshare).")
set(CPACK_DEBIAN_CLI_DESCRIPTION "command-line tool of the kvshare KV-cache tier
${kvs_deb_about}
This package holds the kvshare command: bench, stat, ls and clean, replay and
trace.")
if(KVS_INSTALL_VARIANT STREQUAL "kernel")
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/lib)
else()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/plain/lib)
endif()
find_program(KVS_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(KVS_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
elseif(KVS_INSTALL_VARIANT STREQUAL "kernel")
  set(CPACK_DEBIAN_LIB_PACKAGE_DEPENDS "libc6, liburing2, libnuma1, libhugetlbfs0, libhiredis0.14")
  set(CPACK_DEBIAN_CLI_PACKAGE_DEPENDS "libc6, libjansson4")
else()
  set(CPACK_DEBIAN_LIB_PACKAGE_DEPENDS "libc6, libhiredis0.14")
  set(CPACK_DEBIAN_CLI_PACKAGE_DEPENDS "libc6, libjansson4")
endif()
include(CPack)
