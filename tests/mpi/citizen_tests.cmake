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
# Bound to cores (Open MPI loads a topology of its own when not); at np 3
# two ranks share one, and the last rank is alone in its split.
add_test(NAME mpi.citizen.idle.np2
         COMMAND ${ZCOPY_MPIEXEC} --allow-run-as-root --bind-to core -np 2
                 $<TARGET_FILE:test_citizen> idle)
add_test(NAME mpi.citizen.idle.np3
         COMMAND ${ZCOPY_MPIEXEC} --allow-run-as-root --oversubscribe
                 --bind-to core:overload-allowed -np 3
                 $<TARGET_FILE:test_citizen> idle)
set_tests_properties(mpi.citizen.idle.np2 mpi.citizen.idle.np3 PROPERTIES
                     TIMEOUT ${ZCOPY_MPI_TEST_TIMEOUT} LABELS mpi
                     ENVIRONMENT "${ZCOPY_TEST_ENV}")
foreach(np 2 3)
  zcopy_add_mpi_test(NAME mpi.citizen.replan.np${np} TARGET test_citizen
                     NP ${np} ARGS replan)
endforeach()
zcopy_add_mpi_test(NAME mpi.citizen.release.np2 TARGET test_citizen NP 2 ARGS release)
foreach(np 2 3)
  zcopy_add_mpi_test(NAME mpi.citizen.mapfail.np${np} TARGET test_citizen
                     NP ${np} ARGS mapfail)
  # The slices' repairs even where waits yield (np 3 on 2 cores), whose
  # root would otherwise reduce alone (test_root_moves covers that one).
  zcopy_add_mpi_test(NAME mpi.citizen.mapfail_inplace.np${np}
                     TARGET test_citizen NP ${np} ARGS mapfail-inplace
                     MCA coll_zcopy_root_moves_max=0)
  zcopy_add_mpi_test(NAME mpi.citizen.setupretry.np${np} TARGET test_citizen
                     NP ${np} ARGS setupretry)
  # Each rank moves its block with the root (np 3 waits yield: the root
  # would otherwise move every block itself, test_root_moves).
  zcopy_add_mpi_test(NAME mpi.citizen.mapfail_rooted.np${np}
                     TARGET test_citizen NP ${np} ARGS mapfail-rooted
                     MCA coll_zcopy_root_moves_max=0)
endforeach()
zcopy_add_mpi_test(NAME mpi.citizen.settings.np3 TARGET test_citizen NP 3 ARGS settings)
# Two application contexts: rank 0 runs with PARAM=VALUE, the other two
# with the suite's value; every rank must fall back, naming PARAM.
function(zcopy_add_settings_test name param value)
  add_test(NAME mpi.citizen.${name}.np3
    COMMAND ${ZCOPY_MPIEXEC} --allow-run-as-root --oversubscribe --bind-to none
            -np 1 -x OMPI_MCA_${param}=${value}
            $<TARGET_FILE:test_citizen> settings-mca ${param}
            : -np 2 $<TARGET_FILE:test_citizen> settings-mca ${param})
  set_tests_properties(mpi.citizen.${name}.np3 PROPERTIES
    ENVIRONMENT "${ZCOPY_TEST_ENV}" LABELS mpi)
endfunction()
zcopy_add_settings_test(settings_mca coll_zcopy_small_msg 1024)
# A 512-byte allreduce inline on two ranks only.
zcopy_add_settings_test(settings_inline coll_zcopy_inline_max 48)
# The limit where waits yield: 4 KiB on rank 0, 1 KiB elsewhere.
zcopy_add_settings_test(settings_inline_yield coll_zcopy_inline_max_yield 4096)
# Leaders that pass syncs differently would wait for messages never sent.
zcopy_add_settings_test(settings_dissemination
                        coll_zcopy_span_dissemination_min 2)
# Ranks that disagreed on handing small rooted calls over would wait in a
# step their peers never take.
zcopy_add_settings_test(settings_rooted_yield coll_zcopy_rooted_yield_min
                        4096)
# Or on handing small calls over where each server holds one rank, or
# those that only move data.
zcopy_add_settings_test(settings_one_per_server coll_zcopy_one_per_server_min
                        4096)
zcopy_add_settings_test(settings_one_per_server_moves
                        coll_zcopy_one_per_server_moves 0)
# Or on where a pushed block's parts are cut.
zcopy_add_settings_test(settings_push_part coll_zcopy_ucx_push_part_max 4096)
foreach(t progress.np2 progress.np4 datatypes.np2 datatypes.np4
          reductions.np2 reductions.np4 intercomm.np3 intercomm.np4 stats.np2
          replan.np2 replan.np3
          settings.np3 settings_mca.np3 settings_inline.np3
          settings_inline_yield.np3 settings_dissemination.np3
          settings_rooted_yield.np3 settings_one_per_server.np3
          settings_one_per_server_moves.np3 settings_push_part.np3
          release.np2
          mapfail.np2 mapfail.np3
          mapfail_inplace.np2 mapfail_inplace.np3
          mapfail_rooted.np2 mapfail_rooted.np3
          setupretry.np2 setupretry.np3)
  set_tests_properties(mpi.citizen.${t} PROPERTIES TIMEOUT 120)
endforeach()
# Waits where ranks outnumber cores sleep until the awaited rank stores
# (control.c's bells): forced on every rank by coll_zcopy_yield=1 and
# coll_zcopy_sleep=1.
foreach(np 2 3)
  zcopy_add_mpi_test(NAME mpi.citizen.sleep.np${np} TARGET test_citizen
                     NP ${np} ARGS sleep
                     MCA coll_zcopy_yield=1 coll_zcopy_sleep=1)
endforeach()

# A barrier of a job that has never set a memory range: what zcopy asks of
# the previous component, counted by service collectives of the test's own
# (libzcopy driven directly, so the coll component stays out), and that the
# same barrier still ends the skip once a range is set elsewhere.
zcopy_mpi_executable(test_idle_barrier)
target_include_directories(test_idle_barrier PRIVATE ${PROJECT_SOURCE_DIR}/src)
foreach(np 2 3)
  zcopy_add_mpi_test(NAME mpi.citizen.idle_barrier.np${np}
                     TARGET test_idle_barrier NP ${np}
                     MCA coll=^zcopy mpool=^zcopy)
endforeach()
