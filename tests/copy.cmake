# Tests of the copy engines (io/copy*.c).
kvs_test(io_copy SOURCES io_copy.c LIBS kvs_io LABELS "unit;gpu")
if(KVS_KERNEL AND KVS_HAVE_CUDA)
  target_compile_definitions(test_io_copy_${KVS_V} PRIVATE KVS_HAVE_CUDA=1)
  target_link_libraries(test_io_copy_${KVS_V} PRIVATE CUDA::cudart_static)
endif()
