# Copy engines: host (memcpy; CI and CPU-only runs) in both variants; cuda in the
# kernel variant when the toolkit is found, over the static CUDA runtime so the
# library loads and every test passes on a machine without an NVIDIA driver.
#
# The cuda engine's copy kernel (copy_kernel.cu) is compiled by nvcc through a
# custom command into an object of kvs_io_kernel, rather than by enabling CMake's
# CUDA language: the project stays LANGUAGES C (enable_language(CUDA) would have
# to happen at the top level, probe nvcc and a host C++ compiler at configure
# time, and make CUDA the link language of libkvshare.so.1 and every test),
# there is no device link (no -rdc), and the object needs nothing but the static
# runtime already linked (no exceptions, RTTI or thread-safe statics: no
# libstdc++).  Where nvcc is missing (runtime libraries without the compiler) the
# engine is built without the kernel: auto never picks it, strategy=kernel is
# -EOPNOTSUPP at open.
#
# Architectures: CMAKE_CUDA_ARCHITECTURES if set (the CMake syntax: 90, 90-real,
# 90-virtual, "90;100", native, all, all-major; OFF = nvcc's default), else 90 (H100/H200) as
# SASS + PTX, so newer GPUs JIT it.  The host compiler is nvcc's default
# unless CMAKE_CUDA_HOST_COMPILER is set.
target_sources(kvs_io_${KVS_V} PRIVATE copy.c copy_crew.c copy_nt.c)
if(KVS_KERNEL AND KVS_HAVE_CUDA)
  target_sources(kvs_io_${KVS_V} PRIVATE copy_cuda.c)
  target_compile_definitions(kvs_io_${KVS_V} PRIVATE KVS_HAVE_CUDA=1)
  target_link_libraries(kvs_io_${KVS_V} PRIVATE CUDA::cudart_static)

  if(CUDAToolkit_NVCC_EXECUTABLE AND EXISTS "${CUDAToolkit_NVCC_EXECUTABLE}")
    if(DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "")
      set(kvs_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
    else()
      set(kvs_cuda_archs 90)
    endif()
    set(kvs_cuda_arch_flags "")
    if(NOT kvs_cuda_archs STREQUAL "OFF")
      foreach(a IN LISTS kvs_cuda_archs)
        if(a MATCHES "^(native|all|all-major)$")
          list(APPEND kvs_cuda_arch_flags -arch=${a})
        elseif(a MATCHES "^([0-9]+[af]?)-real$")
          list(APPEND kvs_cuda_arch_flags -gencode=arch=compute_${CMAKE_MATCH_1},code=sm_${CMAKE_MATCH_1})
        elseif(a MATCHES "^([0-9]+[af]?)-virtual$")
          list(APPEND kvs_cuda_arch_flags
               -gencode=arch=compute_${CMAKE_MATCH_1},code=compute_${CMAKE_MATCH_1})
        elseif(a MATCHES "^([0-9]+[af]?)$")
          list(APPEND kvs_cuda_arch_flags
               -gencode=arch=compute_${CMAKE_MATCH_1},code=sm_${CMAKE_MATCH_1}
               -gencode=arch=compute_${CMAKE_MATCH_1},code=compute_${CMAKE_MATCH_1})
        else()
          message(FATAL_ERROR "CMAKE_CUDA_ARCHITECTURES: cannot use '${a}' "
                              "(90, 90-real, 90-virtual, native, all, all-major or OFF)")
        endif()
      endforeach()
    endif()
    set(kvs_nvcc_flags -O3 -std=c++17 -lineinfo
        -Xcompiler=-fPIC,-fvisibility=hidden,-fno-exceptions,-fno-rtti,-fno-threadsafe-statics)
    if(KVS_WERROR)
      list(APPEND kvs_nvcc_flags -Xcompiler=-Wall,-Wextra -Werror=all-warnings)
    endif()
    if(CMAKE_CUDA_HOST_COMPILER)
      list(APPEND kvs_nvcc_flags -ccbin ${CMAKE_CUDA_HOST_COMPILER})
    endif()
    set(kvs_copy_kernel_obj ${CMAKE_CURRENT_BINARY_DIR}/copy_kernel.o)
    add_custom_command(
      OUTPUT ${kvs_copy_kernel_obj}
      COMMAND ${CUDAToolkit_NVCC_EXECUTABLE} ${kvs_nvcc_flags} ${kvs_cuda_arch_flags}
              -c ${CMAKE_CURRENT_SOURCE_DIR}/copy_kernel.cu -o ${kvs_copy_kernel_obj}
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/copy_kernel.cu ${CMAKE_CURRENT_SOURCE_DIR}/copy_kernel.h
              ${CMAKE_CURRENT_SOURCE_DIR}/copy.cmake
      COMMENT "nvcc io/copy_kernel.cu (${KVS_V}; architectures ${kvs_cuda_archs})"
      VERBATIM)
    set_source_files_properties(${kvs_copy_kernel_obj} PROPERTIES EXTERNAL_OBJECT TRUE
                                GENERATED TRUE)
    target_sources(kvs_io_${KVS_V} PRIVATE ${kvs_copy_kernel_obj})
    target_compile_definitions(kvs_io_${KVS_V} PRIVATE KVS_HAVE_COPY_KERNEL=1)
    message(STATUS "kvshare: CUDA copy kernel on (${KVS_V}; architectures ${kvs_cuda_archs})")
  else()
    message(STATUS "kvshare: no nvcc: CUDA copy engine without the copy kernel")
  endif()
endif()
