# fuzz/fuzz.cmake — the libFuzzer build (-DKVS_FUZZ=ON), included by the top-level
# CMakeLists.txt before any target exists, so that every module of the library is
# compiled with the flags below.
#
#   library and helpers:  -fsanitize=fuzzer-no-link,address,undefined (coverage
#                         and comparison tracing for libFuzzer, ASan, UBSan)
#   fuzz targets:         -fsanitize=fuzzer,address,undefined (libFuzzer's main)
#
# Only the plain variant is built: the control-segment validation that the fuzz
# targets exercise (core/segment.c, core/config.c, core/index.c, core/stats.c)
# is shared code, identical in both variants; plain needs libc only.
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "KVS_FUZZ=ON needs clang (libFuzzer ships with clang's compiler-rt): "
                      "configure a fresh build directory with CC=clang or "
                      "-DCMAKE_C_COMPILER=clang (this one uses ${CMAKE_C_COMPILER_ID} "
                      "${CMAKE_C_COMPILER}).  Debian 12: apt-get install clang libclang-rt-14-dev llvm")
endif()
if(NOT KVS_VARIANT STREQUAL "plain")
  message(FATAL_ERROR "KVS_FUZZ=ON builds the plain variant only: add -DKVS_VARIANT=plain "
                      "(got KVS_VARIANT=${KVS_VARIANT})")
endif()
if(NOT KVS_SANITIZE STREQUAL "")
  message(FATAL_ERROR "KVS_FUZZ=ON brings its own ASan+UBSan: leave KVS_SANITIZE empty "
                      "(got '${KVS_SANITIZE}')")
endif()

# Is libFuzzer there (libclang-rt-<ver>-dev on Debian)?
include(CheckCSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,undefined")
check_c_source_compiles([=[
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }
]=] KVS_HAVE_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
if(NOT KVS_HAVE_LIBFUZZER)
  message(FATAL_ERROR "KVS_FUZZ=ON: ${CMAKE_C_COMPILER} cannot link -fsanitize=fuzzer,address,undefined "
                      "(Debian 12: apt-get install libclang-rt-14-dev)")
endif()

# UBSan findings abort (libFuzzer records them as crashes) instead of printing on.
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
