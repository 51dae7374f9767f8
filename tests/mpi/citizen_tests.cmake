# Legal MPI programs that must behave as under stock Open MPI with the
# component loaded: the progress rule, datatype layouts, intercommunicators,
# the stats struct of older binaries (test_citizen.c says what each runs).
zcopy_mpi_executable(test_citizen)
foreach(case progress datatypes reductions)
  foreach(np 2 4)
    zcopy_add_mpi_test(NAME mpi.citizen.${case}.np${np}
                       TARGET test_citizen NP ${np} ARGS ${case})
  endforeach()
endforeach()
foreach(np 3 4)
  zcopy_add_mpi_test(NAME mpi.citizen.intercomm.np${np}
                     TARGET test_citizen NP ${np} ARGS intercomm)
endforeach()
zcopy_add_mpi_test(NAME mpi.citizen.stats.np2 TARGET test_citizen NP 2 ARGS stats)
foreach(t progress.np2 progress.np4 datatypes.np2 datatypes.np4
          reductions.np2 reductions.np4 intercomm.np3 intercomm.np4 stats.np2)
  set_tests_properties(mpi.citizen.${t} PROPERTIES TIMEOUT 120)
endforeach()
