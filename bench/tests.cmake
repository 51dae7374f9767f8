# Included by tests/mpi/CMakeLists.txt once zcopy_add_mpi_test exists.
# Correctness only: every collective, results checked every iteration with
# fresh inputs; the bench exits non-zero on any wrong element. No timing is
# asserted anywhere.
set(ZCOPY_BENCH_CHECK -c all --check --vary -b 8 -e 64K -f 4 -n 5 -w 1
    --buffers activated --no-progress)
foreach(np 2 3)
  zcopy_add_mpi_test(NAME bench.check.np${np} TARGET zcopy_bench NP ${np}
    ARGS ${ZCOPY_BENCH_CHECK} LABELS bench)
endforeach()

# The other forms: in place with a non-zero root, another type and op, and
# plain malloc buffers (these must fall back, and still be right).
zcopy_add_mpi_test(NAME bench.check.inplace.np3 TARGET zcopy_bench NP 3
  ARGS -c all --check --vary -b 8 -e 16K -f 8 -n 3 -w 1 --in-place -r 2
       -t double -o max --no-progress LABELS bench)
zcopy_add_mpi_test(NAME bench.check.malloc.np2 TARGET zcopy_bench NP 2
  ARGS -c all,memcpy --check -b 8 -e 16K -f 8 -n 3 -w 1 -t int8 -o prod
       --buffers malloc --no-progress LABELS bench)

# alltoall_between on one host: every block is between ranks of this host,
# so the call moves nothing and every output block must keep its poison;
# a run that writes into one (--corrupt) must say so (stderr, so not in
# order with the "# errors" line on stdout) and fail.
zcopy_add_mpi_test(NAME bench.check.between.np3 TARGET zcopy_bench NP 3
  ARGS -c alltoall_between --check --vary -b 8 -e 64K -f 8 -n 3 -w 1
       --no-progress LABELS bench)
foreach(kind fails counts)
  zcopy_add_mpi_test(NAME bench.check.between.corrupt_${kind}.np2
    TARGET zcopy_bench NP 2
    ARGS -c alltoall_between --check -b 1K -e 1K -n 2 -w 0 --corrupt
         --no-progress LABELS bench)
endforeach()
set_tests_properties(bench.check.between.corrupt_fails.np2 PROPERTIES
  WILL_FAIL TRUE)
set_tests_properties(bench.check.between.corrupt_counts.np2 PROPERTIES
  PASS_REGULAR_EXPRESSION
  "elements of the empty block from rank [01] were written")

# allgatherv and alltoallv (allgather's and alltoall's data through the
# v-forms), in place and not, every block checked, across sizes that ride
# the control plane and sizes that do not.
foreach(coll allgatherv alltoallv)
  foreach(form plain inplace)
    set(extra)
    if(form STREQUAL "inplace")
      set(extra --in-place)
    endif()
    zcopy_add_mpi_test(NAME bench.check.${coll}.${form}.np3
      TARGET zcopy_bench NP 3
      ARGS -c ${coll} --check --vary -b 8 -e 1M -f 8 -n 3 -w 1 ${extra}
           --no-progress LABELS bench)
  endforeach()
endforeach()

# Calls back to back, each followed by MPI_Barrier (--timing osu) instead
# of the bench's own barrier before it: every call starts as the ranks
# leave the previous barrier, at their own times.
zcopy_add_mpi_test(NAME bench.check.back_to_back.np3 TARGET zcopy_bench NP 3
  ARGS -c all --check --vary -b 8 -e 64K -f 8 -n 5 -w 1 --timing osu
       --no-progress LABELS bench)
# The same in place with a root that is not rank 0 (--timing loop), where
# the root rewrites its input after the barrier, as the next call starts.
zcopy_add_mpi_test(NAME bench.check.back_to_back.inplace.np3
  TARGET zcopy_bench NP 3
  ARGS -c all --check --vary -b 8 -e 16K -f 8 -n 5 -w 1 --timing loop
       --in-place -r 2 --no-progress LABELS bench)
# The barrier after each call is counted apart: calls that fall back
# (buffers not activated) say so, not "mixed" with the barrier's counts.
zcopy_add_mpi_test(NAME bench.back_to_back.path.np2 TARGET zcopy_bench NP 2
  ARGS -c allreduce,bcast -b 8 -e 64 -f 8 -n 5 -w 1 --timing osu
       --buffers plain --no-progress LABELS bench)
set_tests_properties(bench.back_to_back.path.np2 PROPERTIES
  PASS_REGULAR_EXPRESSION "fallback:[^\n]*\n[^\n]*fallback:[^\n]*\n[^\n]*fallback:[^\n]*\n[^\n]*fallback:"
  FAIL_REGULAR_EXPRESSION " mixed\n")

# The checker itself: a run whose results are thrown away must count the
# wrong elements and exit non-zero (two tests: ctest checks either the exit
# status or the output of one test, not both).
foreach(kind fails counts)
  zcopy_add_mpi_test(NAME bench.check.corrupt_${kind} TARGET zcopy_bench NP 2
    ARGS -c allreduce --check -b 1K -e 1K -n 2 -w 0 --corrupt --no-progress
    LABELS bench)
endforeach()
set_tests_properties(bench.check.corrupt_fails PROPERTIES WILL_FAIL TRUE)
set_tests_properties(bench.check.corrupt_counts PROPERTIES
  PASS_REGULAR_EXPRESSION "# errors: [1-9]")

# Copies of 1 MiB and more take memcpy or streaming stores, whichever
# makes the calls faster (src/coll/copy.c): results must be right whichever
# way each call took, and each rank says which way every collective's
# class of length settled on, once it has timed both (two tests, as
# above). Skipped where
# the caches leave nothing to measure (the server map says "memcpy below
# that": a threshold of 1 MiB or less, or coll_zcopy_streaming_min set).
foreach(kind right logged)
  zcopy_add_mpi_test(NAME bench.check.measured_copies_${kind}.np2
    TARGET zcopy_bench NP 2
    ARGS -c bcast,scatter,gather,allgather,alltoall --check --vary -b 2M
         -e 4M -f 2 -n 12 -w 1 --no-progress
    MCA coll_zcopy_verbose=10 LABELS bench)
endforeach()
set_tests_properties(bench.check.measured_copies_logged.np2 PROPERTIES
  PASS_REGULAR_EXPRESSION
  "copies of [0-9]+ MiB to twice that: (memcpy|streaming stores), measured"
  SKIP_REGULAR_EXPRESSION "copies: streaming stores from [0-9]+ bytes [^\n]*, memcpy below that")

# zcopy_progress runs to the end and its allreduce is right (no timing).
zcopy_add_mpi_test(NAME bench.progress.np2 TARGET zcopy_progress NP 2
  ARGS 1000 100 10 LABELS bench)
