#!/usr/bin/env bash
# pin_servers.sh: runs a command pinned to the CPU of its rank's virtual
# server, so that each of coll_zcopy_virtual_servers' servers has a core
# of its own, as real servers do (and as tests/cluster/ gives each of its
# servers). Unpinned, the kernel decides per job which ranks share a core,
# and on two cores every small collective between two virtual servers of
# two ranks ran at one of three speeds by that placement alone
# (docs/performance.md, "Performance between servers").
#
#   mpirun -np 4 --bind-to none bench/pin_servers.sh 2 zcopy_bench ...
#   bench/compare.sh --np 4 --mpirun-args "--bind-to none --mca coll_zcopy_virtual_servers 2" \
#       --wrap "bench/pin_servers.sh 2" ...
#
# SERVERS: the number of virtual servers, as coll_zcopy_virtual_servers
# cuts the ranks (consecutive blocks of ceil(ranks / SERVERS)); server s
# takes the s-th CPU this process may run on, modulo their number. Needs
# Open MPI's OMPI_COMM_WORLD_RANK and _SIZE, and taskset (util-linux).
set -euo pipefail

(($# >= 2)) && [[ $1 =~ ^[1-9][0-9]*$ ]] ||
    { sed -n 2,17p "$0" >&2; exit 2; }
servers=$1
shift
rank=${OMPI_COMM_WORLD_RANK:?not started by Open MPI\'s mpirun}
size=${OMPI_COMM_WORLD_SIZE:?not started by Open MPI\'s mpirun}
per=$(((size + servers - 1) / servers))

# The CPUs this process may use, one per line, from a list such as 0-3,6.
cpus=()
IFS=, read -r -a ranges <<<"$(taskset -cp $$ | sed 's/.*: *//')"
for r in "${ranges[@]}"; do
    if [[ $r == *-* ]]; then
        for ((c = ${r%-*}; c <= ${r#*-}; c++)); do cpus+=("$c"); done
    else
        cpus+=("$r")
    fi
done
exec taskset -c "${cpus[$((rank / per % ${#cpus[@]}))]}" "$@"
