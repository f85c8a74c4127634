# cmake/deb/cpack.cmake — read by cpack before it builds anything (CPACK_PROJECT_CONFIG_FILE,
# cmake/install.cmake): Debian packages install under /usr, with the multiarch libdir
# and no RUNPATH that only a build configured with prefix /usr has.
if(CPACK_GENERATOR STREQUAL "DEB" AND NOT CPACK_KVS_INSTALL_PREFIX STREQUAL "/usr")
  message(FATAL_ERROR "kvshare: this build's prefix is ${CPACK_KVS_INSTALL_PREFIX}, not /usr: "
                      "make the Debian packages with `make deb` (cmake/deb.sh)")
endif()
