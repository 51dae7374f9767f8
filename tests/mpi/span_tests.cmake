# Activated memory remapped at one address while MPI_COMM_WORLD spans
# servers: two virtual servers on this host, or every peer through UCX.
zcopy_mpi_executable(test_span_remap)
zcopy_add_mpi_test(NAME mpi.span_remap.vservers.np4 TARGET test_span_remap
                   NP 4 MCA coll_zcopy_virtual_servers=2 LABELS span)
zcopy_add_mpi_test(NAME mpi.span_remap.ucx.np2 TARGET test_span_remap
                   NP 2 MCA coll_zcopy_transport=ucx LABELS span)
