# The reduction kernels (src/reduce/). Their symbols are internal to
# libzcopy (hidden), so the test builds its own copy from the sources; the
# base layer they report errors through comes from libzcopy itself (one
# copy of its state, which AddressSanitizer's ODR check insists on).
set(ZCOPY_REDUCE_TEST_SOURCES
  ${PROJECT_SOURCE_DIR}/src/reduce/reduce.c
  ${PROJECT_SOURCE_DIR}/src/reduce/reduce_kernels.c
  ${PROJECT_SOURCE_DIR}/src/host/host.c
  ${PROJECT_SOURCE_DIR}/src/host/progress.c)
add_executable(test_reduce_kernels test_reduce_kernels.c ${ZCOPY_REDUCE_TEST_SOURCES})
target_include_directories(test_reduce_kernels PRIVATE
  ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(test_reduce_kernels PRIVATE zcopy_testutil MPI::MPI_C m)
target_compile_options(test_reduce_kernels PRIVATE ${ZCOPY_WARNINGS})
# Test the kernels as the library builds them: vectorised at -O3.
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/reduce/reduce_kernels.c
  PROPERTIES COMPILE_OPTIONS "$<$<NOT:$<CONFIG:Debug>>:-O3>")

zcopy_add_mpi_test(NAME mpi.reduce_kernels TARGET test_reduce_kernels NP 1)
