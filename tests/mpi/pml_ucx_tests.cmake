# Under Open MPI's UCX PML, the default where UCX finds the devices Open
# MPI asks it for (InfiniBand, RoCE), forced here onto shared memory and
# tcp: the point-to-point engine that the spanning path's large reads and
# pushed blocks travel through (coll_zcopy_host.c) is then pml ucx, whose
# blocking calls and probes poll UCX's worker and turn Open MPI's progress
# loop only every so many polls, and whose UCX context keeps shared files
# of its own. The tests that lean on either, again; only where Open MPI
# has the component.
if(NOT EXISTS "${ZCOPY_OMPI_COMPONENT_DIR}/mca_pml_ucx.so")
  return()
endif()
set(ZCOPY_PML_UCX pml=ucx pml_ucx_tls=any pml_ucx_devices=any)
zcopy_add_mpi_test(NAME mpi.pml_ucx.collectives.activated.np2
                   TARGET test_collectives NP 2 ARGS activated
                   MCA ${ZCOPY_PML_UCX} LABELS pml_ucx)
zcopy_add_mpi_test(NAME mpi.pml_ucx.collectives.vservers.noinline.pml.np4
                   TARGET test_collectives NP 4 ARGS activated span-p2p
                   MCA ${ZCOPY_PML_UCX} coll_zcopy_virtual_servers=2
                       coll_zcopy_span_inline_max=0 coll_zcopy_ucx_fetch=pml
                   LABELS span pml_ucx)
zcopy_add_mpi_test(NAME mpi.pml_ucx.span_push.vservers2.np4
                   TARGET test_span_push NP 4 ARGS shared
                   MCA ${ZCOPY_PML_UCX} coll_zcopy_virtual_servers=2
                       coll_zcopy_ucx_push_min=4096 coll_zcopy_span_inline_max=0
                   LABELS span pml_ucx)
foreach(case progress release)
  zcopy_add_mpi_test(NAME mpi.pml_ucx.citizen.${case}.np2 TARGET test_citizen
                     NP 2 ARGS ${case} MCA ${ZCOPY_PML_UCX} LABELS pml_ucx)
endforeach()
