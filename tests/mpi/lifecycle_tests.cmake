# Lifecycle of activated memory and of communicators: remapping at one
# address, peers letting go of freed pages, adjacent blocks (test_remap);
# zero-copy on every kind of derived communicator (test_subcomm).
zcopy_mpi_executable(test_remap)
foreach(np 2 3 4)
  zcopy_add_mpi_test(NAME mpi.remap.np${np} TARGET test_remap NP ${np})
endforeach()

zcopy_mpi_executable(test_subcomm)
foreach(np 3 4)
  zcopy_add_mpi_test(NAME mpi.subcomm.np${np} TARGET test_subcomm NP ${np})
endforeach()
