#!/usr/bin/env bash
# pin_servers.sh: runs a command pinned to its virtual server's share of
# the CPUs, so that each of coll_zcopy_virtual_servers' servers has cores
# of its own, as real servers have and as tests/cluster/ gives each of
# its servers. Unpinned, the kernel decides per job which ranks share a
# core, and on two cores allreduce and bcast of up to 32 KiB between two
# virtual servers of two ranks ran at the speed of that placement
# (docs/performance.md, "Performance between servers").
#
#   mpirun -np 4 --bind-to none bench/pin_servers.sh 2 zcopy_bench ...
#   bench/compare.sh --np 4 --wrap "bench/pin_servers.sh 2" \
#       --mpirun-args "--bind-to none --mca coll_zcopy_virtual_servers 2" ...
#
# SERVERS: the number of virtual servers, cut as the component cuts a
# host's ranks (consecutive blocks of ceil(local ranks / SERVERS) by local
# rank); server s takes the s-th even share of the CPUs the process may
# use. With fewer CPUs than servers nobody is pinned, as in tests/cluster/
# (two servers on one CPU would each run only while the other sleeps).
# Needs Open MPI's OMPI_COMM_WORLD_LOCAL_RANK and _LOCAL_SIZE, and taskset.
set -euo pipefail

(($# >= 2)) && [[ $1 =~ ^[1-9][0-9]*$ ]] ||
    { sed -n 2,19p "$0" >&2; exit 2; }
servers=$1
shift
command -v taskset >/dev/null ||
    { echo "pin_servers.sh: needs taskset (util-linux)" >&2; exit 2; }
rank=${OMPI_COMM_WORLD_LOCAL_RANK:-} size=${OMPI_COMM_WORLD_LOCAL_SIZE:-}
[[ -n $rank && -n $size ]] ||
    { echo "pin_servers.sh: not started by Open MPI's mpirun" >&2; exit 2; }
per=$(((size + servers - 1) / servers))

. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cpu_share.sh"
list=$(cpu_share $((rank / per)) "$servers")
if [[ -z $list ]]; then
    echo "pin_servers.sh: fewer CPUs than $servers servers, not pinned" \
         "(does Open MPI bind? --bind-to none)" >&2
    exec "$@"
fi
exec taskset -c "$list" "$@"
