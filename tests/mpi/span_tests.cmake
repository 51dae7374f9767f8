# Activated memory remapped at one address while MPI_COMM_WORLD spans
# servers: two virtual servers on this host, or every peer through UCX.
zcopy_mpi_executable(test_span_remap)
zcopy_add_mpi_test(NAME mpi.span_remap.vservers.np4 TARGET test_span_remap
                   NP 4 MCA coll_zcopy_virtual_servers=2 LABELS span)
zcopy_add_mpi_test(NAME mpi.span_remap.ucx.np2 TARGET test_span_remap
                   NP 2 MCA coll_zcopy_transport=ucx LABELS span)

# The same at coll_zcopy_verbose 30, which logs each remote key that a new
# activation at the same address retires: at least one must be retired
# (PASS), and the checks must still hold (FAIL: a failed count, an error).
zcopy_add_mpi_test(NAME mpi.span_remap.ucx.keys.np2 TARGET test_span_remap
                   NP 2 MCA coll_zcopy_transport=ucx coll_zcopy_verbose=30
                   LABELS span)
set_tests_properties(mpi.span_remap.ucx.keys.np2 PROPERTIES
  PASS_REGULAR_EXPRESSION "key of generation [0-9]+ retired by generation"
  FAIL_REGULAR_EXPRESSION " [1-9][0-9]* failed|zcopy:[0-9]+\\] [a-z]+ error|non-zero|signal")

# v-collectives with a different layout on every other rank.
zcopy_mpi_executable(test_span_layouts)
zcopy_add_mpi_test(NAME mpi.span_layouts.vservers.np4 TARGET test_span_layouts
                   NP 4 MCA coll_zcopy_virtual_servers=2 LABELS span)
zcopy_add_mpi_test(NAME mpi.span_layouts.ucx.np3 TARGET test_span_layouts
                   NP 3 MCA coll_zcopy_transport=ucx LABELS span)

# zcopy's landing area and scratch served from activated memory by the
# program's own allocator. Not in sanitizer builds, whose allocator its
# free and realloc would stand in front of.
if(NOT CMAKE_C_FLAGS MATCHES "-fsanitize")
  zcopy_mpi_executable(test_span_scratch)
  target_link_libraries(test_span_scratch PRIVATE ${CMAKE_DL_LIBS})
  zcopy_add_mpi_test(NAME mpi.span_scratch.vservers.np4
                     TARGET test_span_scratch NP 4
                     MCA coll_zcopy_virtual_servers=2 LABELS span allocator)
endif()

# Control traffic per collective between servers: a rank that does not
# lead its server sends one record whatever the number of servers, a
# leader one message more per other server (groups of 2 and of 4, 2 to 4
# servers, and every rank a server of its own).
zcopy_mpi_executable(test_span_plane)
zcopy_add_mpi_test(NAME mpi.span_plane.vservers2.np4 TARGET test_span_plane
                   NP 4 MCA coll_zcopy_virtual_servers=2 LABELS span)
# The same where the first range of every process is set on MPI_COMM_SELF
# while the communicator skips its rounds, and a barrier ends the skip.
zcopy_add_mpi_test(NAME mpi.span_plane.wake_elsewhere.np4 TARGET test_span_plane
                   NP 4 MCA coll_zcopy_virtual_servers=2 ARGS wake=elsewhere
                   LABELS span)
zcopy_add_mpi_test(NAME mpi.span_plane.vservers4.np8 TARGET test_span_plane
                   NP 8 MCA coll_zcopy_virtual_servers=4 LABELS span)
zcopy_add_mpi_test(NAME mpi.span_plane.vservers2.np8 TARGET test_span_plane
                   NP 8 MCA coll_zcopy_virtual_servers=2 LABELS span)
# An alltoall or alltoallv whose blocks between servers are all pushed: on virtual
# servers of one host its last sync still spans the servers (the emulated
# cluster's runs, tests/cluster, check that it stays inside each there).
zcopy_mpi_executable(test_span_push)
zcopy_add_mpi_test(NAME mpi.span_push.vservers2.np4 TARGET test_span_push
                   NP 4 ARGS shared
                   MCA coll_zcopy_virtual_servers=2 coll_zcopy_ucx_push_min=4096
                       coll_zcopy_span_inline_max=0
                   LABELS span)
zcopy_add_mpi_test(NAME mpi.span_carry.vservers2.np4 TARGET test_span_push
                   NP 4 ARGS shared carry
                   MCA coll_zcopy_virtual_servers=2 coll_zcopy_ucx_push_min=4096
                   LABELS span)
# Scale by simulation: 16 servers of 2 (a few seconds here).
zcopy_add_mpi_test(NAME mpi.span_plane.vservers16.np32 TARGET test_span_plane
                   NP 32 MCA coll_zcopy_virtual_servers=16 LABELS span scale)
# What an allreduce of 8 KiB brings in through UCX per rank, at 8 servers
# of 2 and 2 of 2: less than twice the vector, not a vector per other rank
# of another server.
foreach(v 2 8)
  math(EXPR np "${v} * 2")
  zcopy_add_mpi_test(NAME mpi.span_plane.landing.vservers${v}.np${np}
                     TARGET test_span_plane NP ${np} ARGS landing
                     MCA coll_zcopy_virtual_servers=${v}
                         coll_zcopy_span_inline_max=0 LABELS span scale)
endforeach()
zcopy_add_mpi_test(NAME mpi.span_plane.ucx.np3 TARGET test_span_plane
                   NP 3 MCA coll_zcopy_transport=ucx LABELS span)
# Syncs by dissemination among the leaders (ceil(log2 S) messages each, not
# S - 1), forced at few servers: 4 of 2 ranks, 3 of 2 (no power of two),
# and 8 of 2.
zcopy_add_mpi_test(NAME mpi.span_plane.dissemination.vservers4.np8
                   TARGET test_span_plane NP 8
                   MCA coll_zcopy_virtual_servers=4
                       coll_zcopy_span_dissemination_min=2 LABELS span)
zcopy_add_mpi_test(NAME mpi.span_plane.dissemination.vservers3.np6
                   TARGET test_span_plane NP 6
                   MCA coll_zcopy_virtual_servers=3
                       coll_zcopy_span_dissemination_min=2 LABELS span)
zcopy_add_mpi_test(NAME mpi.span_plane.dissemination.vservers8.np16
                   TARGET test_span_plane NP 16
                   MCA coll_zcopy_virtual_servers=8
                       coll_zcopy_span_dissemination_min=2 LABELS span scale)

# The fetch engine, chosen per endpoint under coll_zcopy_ucx_fetch=auto.
# Virtual servers reach each other over shared memory, where UCX 1.13
# emulates a get through the target's worker even with a cma lane in the
# endpoint (test_ucx checks what "native" promises): their reads are
# served by the peers, as the verbose output says of every endpoint.
# Transfers only (span_inline_max 0), checked results, zero-copy in every
# row.
zcopy_add_mpi_test(NAME mpi.ucx_fetch.choice.vservers.np4 TARGET zcopy_bench
  NP 4 ARGS -c allgather,alltoall,bcast -b 1M -e 1M -n 2 -w 1 --check
  MCA coll_zcopy_virtual_servers=2 coll_zcopy_span_inline_max=0
      coll_zcopy_verbose=30 LABELS "span;ucx")
set_tests_properties(mpi.ucx_fetch.choice.vservers.np4 PROPERTIES
  PASS_REGULAR_EXPRESSION "its get is emulated by the peer"
  FAIL_REGULAR_EXPRESSION
    "its get is done|fallback|mixed|element [0-9]+ is|non-zero|signal")

# A bound on the UCX requests a rank keeps in flight: at 8 servers of one
# rank an alltoall or allgather of 1 MiB reads from 7 peers at once (up to
# 11 requests in flight per rank measured, with no bound), here at most 3
# whatever the collective, results checked and every row zero-copy. Reads
# by get (one request each, emulated by the peer here) reach the bound
# exactly, which the verbose output's per-stage peak must show.
zcopy_add_mpi_test(NAME mpi.ucx_max_requests.vservers8.np8 TARGET zcopy_bench
  NP 8 ARGS -c alltoall,allgather,bcast,allreduce -b 1M -e 1M -n 2 -w 1 --check
  MCA coll_zcopy_virtual_servers=8 coll_zcopy_span_inline_max=0
      coll_zcopy_ucx_fetch=get coll_zcopy_ucx_max_requests=3
      coll_zcopy_verbose=30
  LABELS "span;ucx;scale")
set_tests_properties(mpi.ucx_max_requests.vservers8.np8 PROPERTIES
  PASS_REGULAR_EXPRESSION "at most 3 UCX requests in flight"
  FAIL_REGULAR_EXPRESSION
    "at most ([4-9]|[1-9][0-9]+) UCX requests|fallback|mixed|element [0-9]+ is|non-zero|signal")
# The same bound on reads answered through the point-to-point engine
# (coll_zcopy_ucx_fetch pml, and auto's large reads): each counts until
# its answer has landed, not only while its request message is out (which
# completes at once, so an alltoall asked all 7 peers together).
zcopy_add_mpi_test(NAME mpi.ucx_max_requests.pml.vservers8.np8
  TARGET zcopy_bench NP 8
  ARGS -c alltoall,allgather -b 1M -e 1M -n 2 -w 1 --check
  MCA coll_zcopy_virtual_servers=8 coll_zcopy_span_inline_max=0
      coll_zcopy_ucx_fetch=pml coll_zcopy_ucx_max_requests=3
      coll_zcopy_verbose=30
  LABELS "span;ucx;scale")
set_tests_properties(mpi.ucx_max_requests.pml.vservers8.np8 PROPERTIES
  PASS_REGULAR_EXPRESSION "at most 3 transfers through the point-to-point"
  FAIL_REGULAR_EXPRESSION
    "at most ([4-9]|[1-9][0-9]+) transfers|fallback|mixed|element [0-9]+ is|non-zero|signal")
# And on pushed alltoall blocks (auto, coll_zcopy_ucx_push_min; servers of
# 2 ranks): a receive and a send each, posted in steps of distance, the
# bound waiting between steps only (12 in flight without it: 6 peers on
# other servers). Results checked; a wait in a cycle would hang.
zcopy_add_mpi_test(NAME mpi.ucx_max_requests.push.vservers4.np8
  TARGET zcopy_bench NP 8
  ARGS -c alltoall -b 4M -e 4M -n 2 -w 1 --check
  MCA coll_zcopy_virtual_servers=4 coll_zcopy_span_inline_max=0
      coll_zcopy_ucx_max_requests=3 coll_zcopy_verbose=30
  LABELS "span;ucx;scale")
set_tests_properties(mpi.ucx_max_requests.push.vservers4.np8 PROPERTIES
  PASS_REGULAR_EXPRESSION "alltoall: at most 3 transfers through the point-to-point"
  FAIL_REGULAR_EXPRESSION
    "at most ([4-9]|[1-9][0-9]+) transfers|fallback|mixed|element [0-9]+ is|non-zero|signal")

# Every collective on plain memory in processes that have activated memory
# elsewhere: each call is declined on every rank and settled by each
# server alone (plane.c), the other servers' messages taken in at the next
# round. Results checked, every row a fallback (the barrier, which has no
# buffers, is left out).
zcopy_add_mpi_test(NAME mpi.bench.plain.vservers.np4 TARGET zcopy_bench
  NP 4 ARGS -c allreduce,reduce,reduce_scatter_block,allgather,bcast,alltoall,gather,scatter
       --buffers plain -b 8 -e 64K -f 8 -n 3 -w 1 --check --vary
  MCA coll_zcopy_virtual_servers=2 LABELS span)
set_tests_properties(mpi.bench.plain.vservers.np4 PROPERTIES
  PASS_REGULAR_EXPRESSION "fallback:"
  FAIL_REGULAR_EXPRESSION "  zcopy\n|  mixed|errors: [1-9]|non-zero|signal")
