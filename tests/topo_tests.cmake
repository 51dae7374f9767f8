# Topology tests over MPI (the unit test of src/topo is tests/unit's
# test_topo). One host split into virtual servers: at np 4 with 2 servers
# of 2 ranks, at np 5 with blocks of 3 and 2, and with one server for
# comparison; the map runs also check what coll_zcopy_verbose 10 prints.
add_executable(test_topology ${CMAKE_CURRENT_LIST_DIR}/mpi/test_topology.c)
target_link_libraries(test_topology PRIVATE zcopy_testutil m)
target_compile_options(test_topology PRIVATE ${ZCOPY_WARNINGS})

foreach(vs 1 2)
  zcopy_add_mpi_test(NAME mpi.topology.vs${vs}.np4 TARGET test_topology NP 4
    ARGS --virtual-servers ${vs}
    MCA coll_zcopy_virtual_servers=${vs} LABELS topo)
endforeach()
# coll_zcopy_transport=ipc: never UCX; spanning communicators fall back.
zcopy_add_mpi_test(NAME mpi.topology.vs2.ipc.np4 TARGET test_topology NP 4
  ARGS --virtual-servers 2 --transport-ipc
  MCA coll_zcopy_virtual_servers=2 coll_zcopy_transport=ipc LABELS topo)
zcopy_add_mpi_test(NAME mpi.topology.vs2.np5 TARGET test_topology NP 5
  ARGS --virtual-servers 2
  MCA coll_zcopy_virtual_servers=2 LABELS topo)

foreach(np 4 5)
  zcopy_add_mpi_test(NAME mpi.topology.map.vs2.np${np} TARGET test_topology
    NP ${np} ARGS --virtual-servers 2 --expect-map
    MCA coll_zcopy_virtual_servers=2 coll_zcopy_verbose=10 LABELS topo)
endforeach()
zcopy_add_mpi_test(NAME mpi.topology.map.vs1.np4 TARGET test_topology NP 4
  ARGS --virtual-servers 1 --expect-map
  MCA coll_zcopy_virtual_servers=1 coll_zcopy_verbose=10 LABELS topo)
