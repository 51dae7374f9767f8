# Every intercepted collective against the test's own reference, with the
# path (zero-copy or fallback) checked around every call.
zcopy_mpi_executable(test_collectives)
foreach(np 2 3 4)
  zcopy_add_mpi_test(NAME mpi.collectives.activated.np${np}
                     TARGET test_collectives NP ${np} ARGS activated)
endforeach()
zcopy_add_mpi_test(NAME mpi.collectives.malloc.np2
                   TARGET test_collectives NP 2 ARGS malloc)
zcopy_add_mpi_test(NAME mpi.collectives.mixed.np3
                   TARGET test_collectives NP 3 ARGS mixed)
