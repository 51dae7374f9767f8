# The UCX layer (src/ucx) on its own: registration, endpoints, remote keys
# by generation, get/put/flush between ranks. Its symbols are internal to
# libzcopy (hidden), so the test builds its own copy of the layer; the
# base layer it reports errors through comes from libzcopy (one copy of its
# state, which AddressSanitizer's ODR check insists on), but for the clock
# and the growable arrays, which hold none, and the host hooks, whose
# defaults it runs on.
zcopy_mpi_executable(test_ucx)
target_sources(test_ucx PRIVATE
  ${PROJECT_SOURCE_DIR}/src/ucx/context.c
  ${PROJECT_SOURCE_DIR}/src/ucx/ep.c
  ${PROJECT_SOURCE_DIR}/src/ucx/mem.c
  ${PROJECT_SOURCE_DIR}/src/ucx/xfer.c
  ${PROJECT_SOURCE_DIR}/src/ucx/serve.c
  ${PROJECT_SOURCE_DIR}/src/host/host.c
  ${PROJECT_SOURCE_DIR}/src/host/progress.c
  ${PROJECT_SOURCE_DIR}/src/base/array.c
  ${PROJECT_SOURCE_DIR}/src/base/clock.c)
target_include_directories(test_ucx PRIVATE
  ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
target_compile_definitions(test_ucx PRIVATE _GNU_SOURCE)
target_link_libraries(test_ucx PRIVATE PkgConfig::UCX Threads::Threads)

foreach(np 2 3)
  zcopy_add_mpi_test(NAME mpi.ucx.np${np} TARGET test_ucx NP ${np} LABELS ucx)
  set_tests_properties(mpi.ucx.np${np} PROPERTIES TIMEOUT 60)
endforeach()
