# Finds what the coll component needs from the Open MPI installation:
#   ZCOPY_OMPI_INCLUDE_DIRS   public and internal header directories
#   ZCOPY_OMPI_LIBRARIES      libmpi, libopen-rte, libopen-pal
#   ZCOPY_OMPI_COMPONENT_DIR  where `cmake --install` puts mca_coll_zcopy.so
#   ZCOPY_OMPI_VERSION        e.g. 4.1.4 (the component is for 4.1.x only)

find_program(ZCOPY_MPICC NAMES mpicc REQUIRED)
find_program(ZCOPY_OMPI_INFO NAMES ompi_info REQUIRED)

execute_process(COMMAND ${ZCOPY_MPICC} --showme:incdirs
                OUTPUT_VARIABLE _incdirs OUTPUT_STRIP_TRAILING_WHITESPACE)
separate_arguments(ZCOPY_OMPI_INCLUDE_DIRS UNIX_COMMAND "${_incdirs}")
execute_process(COMMAND ${ZCOPY_MPICC} --showme:libdirs
                OUTPUT_VARIABLE _libdirs OUTPUT_STRIP_TRAILING_WHITESPACE)
separate_arguments(_libdirs UNIX_COMMAND "${_libdirs}")

foreach(_lib mpi open-rte open-pal)
  find_library(ZCOPY_LIB_${_lib} NAMES ${_lib} HINTS ${_libdirs} REQUIRED)
  list(APPEND ZCOPY_OMPI_LIBRARIES ${ZCOPY_LIB_${_lib}})
endforeach()

find_file(ZCOPY_OMPI_COLL_H ompi/mca/coll/coll.h PATHS ${ZCOPY_OMPI_INCLUDE_DIRS}
          NO_DEFAULT_PATH)
if(NOT ZCOPY_OMPI_COLL_H)
  message(FATAL_ERROR "Open MPI's internal headers are missing "
          "(ompi/mca/coll/coll.h); install libopenmpi-dev")
endif()

execute_process(COMMAND ${ZCOPY_OMPI_INFO} --version
                OUTPUT_VARIABLE _ver OUTPUT_STRIP_TRAILING_WHITESPACE)
string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" ZCOPY_OMPI_VERSION "${_ver}")
if(NOT ZCOPY_OMPI_VERSION MATCHES "^4\\.1\\.")
  message(FATAL_ERROR "coll/zcopy is written for Open MPI 4.1.x; found "
          "'${ZCOPY_OMPI_VERSION}'")
endif()

# The first entry of mca_base_component_path is Open MPI's own component dir.
execute_process(COMMAND ${ZCOPY_OMPI_INFO} --parsable --param mca base --level 9
                OUTPUT_VARIABLE _params)
string(REGEX MATCH "mca_base_component_path:value:\"?([^:\"\n]+)" _m "${_params}")
set(ZCOPY_OMPI_COMPONENT_DIR "${CMAKE_MATCH_1}" CACHE PATH
    "Where to install mca_coll_zcopy.so (Open MPI's component directory)")
message(STATUS "Open MPI ${ZCOPY_OMPI_VERSION}; components go to ${ZCOPY_OMPI_COMPONENT_DIR}")
