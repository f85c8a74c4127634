# Helpers shared by every CMakeLists.txt of the tree: compiler flags, the kernel
# variant's dependencies, per-variant module targets, tests and benchmarks.

add_compile_options(-Wall -Wextra)
add_compile_definitions(_GNU_SOURCE)
if(KVS_WERROR)
  add_compile_options(-Werror)
endif()

if(KVS_SANITIZE STREQUAL "asan")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
elseif(KVS_SANITIZE STREQUAL "tsan")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT KVS_SANITIZE STREQUAL "")
  message(FATAL_ERROR "KVS_SANITIZE must be empty, asan or tsan (got '${KVS_SANITIZE}')")
endif()

# liburing, libnuma, libhugetlbfs (required by the kernel variant) and the CUDA
# runtime (optional, KVS_CUDA).  Imported as kvs::uring, kvs::numa,
# kvs::hugetlbfs and CUDA::cudart_static; KVS_HAVE_CUDA says whether CUDA is in.
macro(kvs_find_kernel_deps)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(KVS_URING REQUIRED IMPORTED_TARGET liburing>=2.3)
  add_library(kvs::uring ALIAS PkgConfig::KVS_URING)
  find_path(KVS_NUMA_INCLUDE numa.h)
  find_library(KVS_NUMA_LIB numa)
  find_path(KVS_HUGETLBFS_INCLUDE hugetlbfs.h)
  find_library(KVS_HUGETLBFS_LIB hugetlbfs)
  foreach(dep KVS_NUMA_INCLUDE KVS_NUMA_LIB KVS_HUGETLBFS_INCLUDE KVS_HUGETLBFS_LIB)
    if(NOT ${dep})
      message(FATAL_ERROR "kernel variant: ${dep} not found "
                          "(apt-get install libnuma-dev libhugetlbfs-dev, or -DKVS_VARIANT=plain)")
    endif()
  endforeach()
  add_library(kvs::numa UNKNOWN IMPORTED)
  set_target_properties(kvs::numa PROPERTIES IMPORTED_LOCATION ${KVS_NUMA_LIB}
                        INTERFACE_INCLUDE_DIRECTORIES ${KVS_NUMA_INCLUDE})
  add_library(kvs::hugetlbfs UNKNOWN IMPORTED)
  set_target_properties(kvs::hugetlbfs PROPERTIES IMPORTED_LOCATION ${KVS_HUGETLBFS_LIB}
                        INTERFACE_INCLUDE_DIRECTORIES ${KVS_HUGETLBFS_INCLUDE})

  set(KVS_HAVE_CUDA OFF)
  if(NOT KVS_CUDA STREQUAL "OFF")
    if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
      set(CUDAToolkit_ROOT /usr/local/cuda)
    endif()
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND)
      set(KVS_HAVE_CUDA ON)
      message(STATUS "kvshare: CUDA copy engine on (CUDA ${CUDAToolkit_VERSION}, static cudart)")
    elseif(KVS_CUDA STREQUAL "ON")
      message(FATAL_ERROR "KVS_CUDA=ON but no CUDA toolkit was found")
    else()
      message(STATUS "kvshare: no CUDA toolkit, CUDA copy engine off")
    endif()
  endif()
endmacro()

# Sets the variables a module CMakeLists.txt sees for one variant:
#   KVS_V       kernel | plain
#   KVS_KERNEL  1 | 0 (also a compile definition of every module target)
#   KVS_VDIR    binary dir of this variant (tests and perf binaries go below it)
#   KVS_LIBDIR  where libkvshare.so.1 of this variant goes
macro(kvs_variant_begin v)
  set(KVS_V ${v})
  set(KVS_VDIR ${CMAKE_BINARY_DIR}/${v})
  if("${v}" STREQUAL "kernel")
    set(KVS_KERNEL 1)
    set(KVS_LIBDIR ${CMAKE_BINARY_DIR}/lib)
  else()
    set(KVS_KERNEL 0)
    set(KVS_LIBDIR ${CMAKE_BINARY_DIR}/plain/lib)
  endif()
endmacro()

# Common properties of a module's static library (kvs_<module>_${KVS_V}): PIC,
# hidden visibility (only KVS_API symbols leave libkvshare.so.1), the variant
# define, the public header.  Everything includes "<module>/<file>.h" through the
# project root (a module's own directory is deliberately not on the include
# path: numa/numa.h would shadow libnuma's <numa.h>); "<module>/<module>.h" is
# what other modules may include, and link dependencies enforce the rest.
function(kvs_module tgt)
  set_target_properties(${tgt} PROPERTIES POSITION_INDEPENDENT_CODE ON
                        C_VISIBILITY_PRESET hidden)
  target_compile_definitions(${tgt} PUBLIC KVS_KERNEL=${KVS_KERNEL})
  target_include_directories(${tgt} PUBLIC ${PROJECT_SOURCE_DIR}/include
                             INTERFACE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${tgt} PUBLIC kvs_common)
endfunction()

# libkvshare.so.1 of the current variant: every module archive, whole.
macro(kvs_add_shared_library)
  # version.c and error.c are compiled in directly: they are the library's own
  # exports whether or not a module references them (the kvs_common archive's copy
  # of error.c is then never pulled in).
  add_library(kvshare_${KVS_V} SHARED ${PROJECT_SOURCE_DIR}/core/version.c
              ${PROJECT_SOURCE_DIR}/common/error.c)
  kvs_module(kvshare_${KVS_V})
  target_link_libraries(kvshare_${KVS_V} PRIVATE
    "$<LINK_LIBRARY:WHOLE_ARCHIVE,kvs_store_${KVS_V},kvs_core_${KVS_V},kvs_io_${KVS_V},kvs_numa_${KVS_V},kvs_wait_${KVS_V}>")
  target_link_options(kvshare_${KVS_V} PRIVATE -Wl,--no-undefined -Wl,-z,noexecstack)
  # The exports: exactly the names of libkvshare.map, versioned KVSHARE_1; every
  # other symbol is local (tests/abi_symbols.sh checks the result).
  target_link_options(kvshare_${KVS_V} PRIVATE
                      -Wl,--version-script=${PROJECT_SOURCE_DIR}/libkvshare.map)
  if(KVS_LD_NO_UNDEFINED_VERSION)
    target_link_options(kvshare_${KVS_V} PRIVATE -Wl,--no-undefined-version)
  endif()
  set_property(TARGET kvshare_${KVS_V} APPEND PROPERTY LINK_DEPENDS
               ${PROJECT_SOURCE_DIR}/libkvshare.map)
  # store/core link the other modules normally too: link them whole everywhere here.
  foreach(lib kvs_core_${KVS_V} kvs_io_${KVS_V} kvs_numa_${KVS_V} kvs_wait_${KVS_V})
    set_property(TARGET kvshare_${KVS_V} PROPERTY LINK_LIBRARY_OVERRIDE_${lib} WHOLE_ARCHIVE)
  endforeach()
  # The file is libkvshare.so.<SONAME major>.<minor>.<patch> (Debian's and
  # libtool's scheme: the name says which SONAME it is); the minor counts
  # additions to the KVSHARE_1 ABI (libkvshare.map), the patch fixes.  Not the
  # project's version, which names releases (0.1.0 ships ABI 1.1.0: KVSHARE_1.1
  # added kvs_store_flush).
  set_target_properties(kvshare_${KVS_V} PROPERTIES
    OUTPUT_NAME kvshare VERSION 1.3.0 SOVERSION 1
    LIBRARY_OUTPUT_DIRECTORY ${KVS_LIBDIR})
endmacro()

# kvs_test(<name> SOURCES <src...> [LIBS <targets...>] [LABELS <labels...>]
#          [TIMEOUT <s>] [RUN_SERIAL] [ARGS <args...>])
# One CTest test "<variant>.<name>" running ${KVS_VDIR}/tests/<name>.  Exit 77 is a
# skip.  LIBS are variant-free names (kvs_core, kvshare, ...): the variant suffix
# is added here.  RUN_SERIAL for tests that measure a machine-wide resource (the
# hugepage pool).  Default timeout 120 s.
function(kvs_test name)
  cmake_parse_arguments(T "RUN_SERIAL" "TIMEOUT" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  set(tgt test_${name}_${KVS_V})
  add_executable(${tgt} ${T_SOURCES})
  set_target_properties(${tgt} PROPERTIES OUTPUT_NAME ${name}
                        RUNTIME_OUTPUT_DIRECTORY ${KVS_VDIR}/tests)
  target_include_directories(${tgt} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${tgt} PRIVATE KVS_TEST_VARIANT="${KVS_V}")
  foreach(lib IN LISTS T_LIBS)
    target_link_libraries(${tgt} PRIVATE ${lib}_${KVS_V})
  endforeach()
  target_link_libraries(${tgt} PRIVATE kvs_common Threads::Threads)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_test(NAME ${KVS_V}.${name} COMMAND ${tgt} ${T_ARGS})
  set_tests_properties(${KVS_V}.${name} PROPERTIES SKIP_RETURN_CODE 77
                       TIMEOUT ${T_TIMEOUT} LABELS "${KVS_V};${T_LABELS}")
  if(T_RUN_SERIAL)
    set_tests_properties(${KVS_V}.${name} PROPERTIES RUN_SERIAL ON)
  endif()
endfunction()

# kvs_other_variant(<var>): the variant other than ${KVS_V} when both are built,
# else empty (a mixed-node test runs the other variant's build of its program).
function(kvs_other_variant var)
  set(other "")
  if(kvs_variants STREQUAL "kernel;plain")
    if(KVS_V STREQUAL "kernel")
      set(other plain)
    else()
      set(other kernel)
    endif()
  endif()
  set(${var} "${other}" PARENT_SCOPE)
endfunction()

# kvs_bench(<name> SOURCES <src...> [LIBS <targets...>]): ${KVS_VDIR}/perf/<name>.
function(kvs_bench name)
  cmake_parse_arguments(B "" "" "SOURCES;LIBS" ${ARGN})
  set(tgt bench_${name}_${KVS_V})
  add_executable(${tgt} ${B_SOURCES})
  set_target_properties(${tgt} PROPERTIES OUTPUT_NAME ${name}
                        RUNTIME_OUTPUT_DIRECTORY ${KVS_VDIR}/perf)
  target_compile_definitions(${tgt} PRIVATE KVS_BENCH_VARIANT="${KVS_V}")
  foreach(lib IN LISTS B_LIBS)
    target_link_libraries(${tgt} PRIVATE ${lib}_${KVS_V})
  endforeach()
  target_link_libraries(${tgt} PRIVATE kvs_common Threads::Threads)
endfunction()

# A version script naming a symbol that is not defined fails the link where the
# linker can say so (GNU ld, gold and lld all can).
include(CheckLinkerFlag)
check_linker_flag(C "-Wl,--no-undefined-version" KVS_LD_NO_UNDEFINED_VERSION)

set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)
