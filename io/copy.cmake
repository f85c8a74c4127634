# Copy engines: host (memcpy; CI and CPU-only runs) in both variants; cuda in the
# kernel variant when the toolkit is found, over the static CUDA runtime so the
# library loads and every test passes on a machine without an NVIDIA driver.
target_sources(kvs_io_${KVS_V} PRIVATE copy.c)
if(KVS_KERNEL AND KVS_HAVE_CUDA)
  target_sources(kvs_io_${KVS_V} PRIVATE copy_cuda.c)
  target_compile_definitions(kvs_io_${KVS_V} PRIVATE KVS_HAVE_CUDA=1)
  target_link_libraries(kvs_io_${KVS_V} PRIVATE CUDA::cudart_static)
endif()
