# Every intercepted collective against the test's own reference, with the
# path (zero-copy or fallback) checked around every call.
zcopy_mpi_executable(test_collectives)
zcopy_add_mpi_test(NAME mpi.collectives.activated.np2
                   TARGET test_collectives NP 2 ARGS activated)
# Waits that yield (and sleep, whatever the machine's cores), with their
# inline limit (the default, 8 KiB per rank): every size up to it inline,
# which the test checks the communicators report; the mapped path at np 3
# and 4 runs in alloc_mem.np3/np4.
foreach(np 3 4)
  zcopy_add_mpi_test(NAME mpi.collectives.activated.np${np}
                     TARGET test_collectives NP ${np} ARGS activated
                     MCA coll_zcopy_yield=1 coll_zcopy_sleep=1
                         coll_zcopy_inline_max_yield=8192)
endforeach()
zcopy_add_mpi_test(NAME mpi.collectives.malloc.np2
                   TARGET test_collectives NP 2 ARGS malloc)
zcopy_add_mpi_test(NAME mpi.collectives.mixed.np3
                   TARGET test_collectives NP 3 ARGS mixed)

# Span mode: MPI_COMM_WORLD spans servers, either two virtual servers on
# this host or every peer reached through UCX. Every eligible collective
# must still run zero-copy, WORLD's and the dup's through UCX (see the
# header of test_collectives.c for what changes on such communicators).
foreach(np 4 3)
  zcopy_add_mpi_test(NAME mpi.collectives.vservers.np${np}
                     TARGET test_collectives NP ${np} ARGS activated span
                     MCA coll_zcopy_virtual_servers=2 LABELS span)
endforeach()
# The same without the latency path between servers: every size through
# the UCX transfers and syncs (coll_zcopy_span_inline_max 0), with each
# fetch engine: UCX gets (what auto picks over rc and dc), reads served by
# the peer's tagged sends (what auto picks here and over tcp for reads
# below coll_zcopy_ucx_p2p_min, which all of these are), and reads
# served through Open MPI's point-to-point engine (span-p2p: p2p_bytes
# must count them).
foreach(fetch get send pml)
  set(mode span)
  if(fetch STREQUAL "pml")
    set(mode span-p2p)
  endif()
  zcopy_add_mpi_test(NAME mpi.collectives.vservers.noinline.${fetch}.np4
                     TARGET test_collectives NP 4 ARGS activated ${mode}
                     MCA coll_zcopy_virtual_servers=2
                         coll_zcopy_span_inline_max=0
                         coll_zcopy_ucx_fetch=${fetch} LABELS span)
endforeach()
# auto answers large reads through the point-to-point engine
# (coll_zcopy_ucx_p2p_min; 4 MiB by default, beyond every read of the
# test): at 64 KiB every phase that moves data between servers reads some
# through it, checked by span-p2p, while the other spanning tests, under
# the default, check that none of their smaller reads does.
zcopy_add_mpi_test(NAME mpi.collectives.vservers.noinline.p2p_min.np4
                   TARGET test_collectives NP 4 ARGS activated span-p2p
                   MCA coll_zcopy_virtual_servers=2
                       coll_zcopy_span_inline_max=0
                       coll_zcopy_ucx_p2p_min=65536 LABELS span)
# auto pushes alltoall blocks of coll_zcopy_ucx_push_min or more between
# servers (256 KiB by default, which only the alltoall sweep's largest
# blocks reach): at 64 KiB the blocks of 96 KiB (the sweep's largest int32
# row on 4 ranks) are pushed as well, and test_collectives checks the
# bytes each call received through the point-to-point engine against the
# blocks it expects pushed.
zcopy_add_mpi_test(NAME mpi.collectives.vservers.noinline.push_min.np4
                   TARGET test_collectives NP 4 ARGS activated span
                   MCA coll_zcopy_virtual_servers=2
                       coll_zcopy_span_inline_max=0
                       coll_zcopy_ucx_push_min=65536 LABELS span)
# Scale by simulation: 16 ranks on 8 virtual servers of 2 (oversubscribed
# on 2 cores, so correctness only; 60-110 s here, alone).
zcopy_add_mpi_test(NAME mpi.collectives.vservers8.np16
                   TARGET test_collectives NP 16 ARGS activated span
                   MCA coll_zcopy_virtual_servers=8 LABELS span scale)
set_tests_properties(mpi.collectives.vservers8.np16 PROPERTIES TIMEOUT 600)
# Leaders passing rounds in steps (Bruck's gather for arrivals and their
# payloads, dissemination for syncs), forced at 3 servers: uneven groups
# (2, 2, 1), and every rank a server of its own. From 3 servers on, so that
# the splits of 2 servers (half0, parity1) send each server only its ranks'
# blocks while WORLD passes rounds in steps.
zcopy_add_mpi_test(NAME mpi.collectives.vservers3.dissemination.np5
                   TARGET test_collectives NP 5 ARGS activated span
                   MCA coll_zcopy_virtual_servers=3
                       coll_zcopy_span_dissemination_min=3 LABELS span)
zcopy_add_mpi_test(NAME mpi.collectives.ucx.dissemination.np3
                   TARGET test_collectives NP 3 ARGS activated span
                   MCA coll_zcopy_transport=ucx
                       coll_zcopy_span_dissemination_min=2 LABELS span)
foreach(np 2 3)
  zcopy_add_mpi_test(NAME mpi.collectives.ucx.np${np}
                     TARGET test_collectives NP ${np} ARGS activated span
                     MCA coll_zcopy_transport=ucx LABELS span)
endforeach()

# Memory from MPI_Alloc_mem (mpool/zcopy), the program calling nothing of
# zcopy's: named by the info key, or by every allocation's default hints.
foreach(np 2 3 4)
  zcopy_add_mpi_test(NAME mpi.collectives.alloc_mem.np${np}
                     TARGET test_collectives NP ${np} ARGS alloc_mem
                     LABELS alloc_mem)
endforeach()
zcopy_add_mpi_test(NAME mpi.collectives.alloc_mem_default.np2
                   TARGET test_collectives NP 2 ARGS alloc_mem_default
                   MCA mpool_base_default_hints=zcopy LABELS alloc_mem)
zcopy_add_mpi_test(NAME mpi.collectives.alloc_mem.vservers.np4
                   TARGET test_collectives NP 4 ARGS alloc_mem span
                   MCA coll_zcopy_virtual_servers=2 LABELS "alloc_mem;span")
