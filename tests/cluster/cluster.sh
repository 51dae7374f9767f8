#!/usr/bin/env bash
# cluster.sh: an emulated cluster on one machine. Each server is a set of
# Linux namespaces held by one small process: its own network (a veth link
# to a bridge shared by the cluster, link-local addresses), its own hostname
# (UTS), its own System V IPC and its own /dev/shm and /etc/hosts (mount).
# mpirun starts on the first server and reaches the others through an rsh
# agent that enters their namespaces, so Open MPI, UCX and zcopy see real
# servers: other hostnames, tcp between them, no shared memory across.
#
# Nothing is registered with `ip netns`: the namespaces live as long as
# their holder processes (and whatever runs inside), so `down`, an exit
# trap or the death of the run that made a cluster removes everything.
# See tests/cluster/README.md for what this does and does not emulate.
set -euo pipefail

readonly SKIP=77 # CTest's SKIP_RETURN_CODE for "cannot make namespaces here"
readonly SUBNET=169.254.77

usage() {
    cat <<'EOF'
usage: tests/cluster/cluster.sh COMMAND [options]
  check                  exit 0 if clusters can be made here, else 77 and why
  up LAYOUT              make a cluster (idempotent: an existing one with the
                         same layout is kept)
  run LAYOUT [--] MPIRUN-ARGS... PROGRAM [ARGS]
                         mpirun PROGRAM on LAYOUT's ranks, from server 0;
                         makes the cluster if it is not up and removes it
                         afterwards; exits with mpirun's status, or 3 if the
                         output has a UCX, Open MPI or zcopy error or
                         warning line
  exec SERVER CMD...     run CMD inside server SERVER (0-based)
  down                   remove the cluster: every process inside is killed
  status                 list the clusters that are up
options (before the command's own arguments):
  --name NAME            cluster name [zc<pid> for run, zc for up/down/exec]
  --quiet                run: print only the program's output
LAYOUT: SxR (S servers of R ranks) or R0,R1,... (ranks on each server),
e.g. 2x1, 2x2, 2,1,1. Servers get their own CPUs where the machine has at
least one per server (ranks then share their server's CPUs); with more
servers than CPUs every rank may run anywhere. When ranks outnumber the
CPUs they may use, run asks Open MPI to yield (mpi_yield_when_idle 1).
Environment: CLUSTER_STATE [/run/emulated-cluster] holds the state.
EOF
}

die() { echo "cluster.sh: $*" >&2; exit 2; }
skip() { echo "cluster.sh: SKIP: $*" >&2; exit "$SKIP"; }

state_root=${CLUSTER_STATE:-/run/emulated-cluster}
name='' quiet=0

# --- layout -----------------------------------------------------------------

# parse_layout LAYOUT: sets ranks=(R0 R1 ...).
parse_layout() {
    local l=$1 s r i
    ranks=()
    if [[ $l =~ ^([1-9][0-9]{0,1})x([1-9][0-9]{0,3})$ ]]; then
        s=${BASH_REMATCH[1]} r=${BASH_REMATCH[2]}
        ((s <= 16)) || die "layout '$l': 2 to 16 servers"
        for ((i = 0; i < s; i++)); do ranks+=("$r"); done
    elif [[ $l =~ ^[1-9][0-9]*(,[1-9][0-9]*)+$ ]]; then
        IFS=, read -r -a ranks <<<"$l"
    else
        die "bad layout '$l': SxR (e.g. 2x2) or ranks per server (e.g. 2,1,1)"
    fi
    ((${#ranks[@]} >= 2 && ${#ranks[@]} <= 16)) ||
        die "layout '$l': 2 to 16 servers"
}

# The CPUs of each server: cpu_share, shared with bench/pin_servers.sh.
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../../bench/cpu_share.sh"

# --- state ------------------------------------------------------------------

dir() { echo "$state_root/$name"; }
server_pid() { cat "$(dir)/s$1.pid"; }

# A pid file is trusted only while its process is the holder it recorded:
# the same start time and the network namespace it made, which is not
# ours. A stale file (its cluster killed with the script, the pid reused
# since) never leads to nsenter into, or kills in, someone else's world.
proc_start() { awk '{ print $22 }' "/proc/$1/stat" 2>/dev/null; }
holder_ok() {
    local file=$1 pid
    [[ -s $file && -s $file.id ]] || return 1
    pid=$(cat "$file")
    [[ "$(proc_start "$pid") $(readlink "/proc/$pid/ns/net" 2>/dev/null)" == \
       "$(cat "$file.id")" && $(readlink "/proc/$pid/ns/net") != "$own_netns" ]]
}
is_up() { [[ -f $(dir)/layout ]] && holder_ok "$(dir)/hub.pid"; }

# with_lock CMD...: one up or down at a time on the machine, each a
# second or less (runs may overlap; each makes a cluster of its own unless
# told to share one by name). Re-entered (from the exit trap, after a
# failure inside a locked command) it runs CMD under the lock it holds.
locked=0
with_lock() {
    if ((locked)); then
        "$@"
        return
    fi
    mkdir -p "$state_root"
    chmod 0700 "$state_root"
    exec {lock_fd}>"$state_root/.lock"
    flock "$lock_fd"
    locked=1
    sweep_stale
    "$@"
    locked=0
    flock -u "$lock_fd"
    exec {lock_fd}>&-
}

# Clusters whose holders are gone (killed with the script that made them):
# nothing of them runs any more, only their state is left.
sweep_stale() {
    local d
    for d in "$state_root"/*/; do
        [[ -d $d ]] || continue
        holder_ok "${d}hub.pid" || rm -rf "$d"
    done
}

check() {
    local why=''
    if [[ $(id -u) -ne 0 ]]; then
        why="not root: namespaces need CAP_SYS_ADMIN"
    elif ! command -v ip >/dev/null || ! command -v nsenter >/dev/null ||
         ! command -v unshare >/dev/null; then
        why="needs ip (iproute2), nsenter and unshare (util-linux)"
    elif ! unshare --net --uts --ipc --mount true 2>/dev/null; then
        why="this kernel or container refuses new namespaces"
    elif ! unshare --net sh -c 'ip link add zcv0 type veth peer name zcv1' 2>/dev/null; then
        why="no veth links in a new network namespace"
    fi
    if [[ -n $why ]]; then
        echo "cluster.sh: cannot make an emulated cluster here: $why" >&2
        return "$SKIP"
    fi
}

# holder FILE WATCH UNSHARE-ARGS... -- SETUP: starts a process in new
# namespaces that runs SETUP, writes its pid to FILE and then waits: for
# ever when WATCH is 0, else until process WATCH is gone (a run killed
# with SIGKILL, say): then it kills whatever still runs in its network
# namespace and removes the cluster's state. It is in a session of its own
# so that a terminal's or CTest's signals reach only what runs inside.
holder() {
    local file=$1 watch=$2 setup
    shift 2
    local -a args=()
    while [[ $1 != -- ]]; do args+=("$1"); shift; done
    setup=$2
    local wait_cmd='exec sleep infinity'
    ((watch)) && wait_cmd="while kill -0 $watch 2>/dev/null; do sleep 1; done
        me=\$(readlink /proc/\$\$/ns/net)
        for p in /proc/[0-9]*; do
            [ \"\$(readlink \$p/ns/net 2>/dev/null)\" = \"\$me\" ] &&
                [ \${p#/proc/} != \$\$ ] && kill -9 \${p#/proc/} 2>/dev/null
        done
        rm -rf '$(dir)'"
    setsid unshare "${args[@]}" sh -c "$setup && echo \$\$ >'$file.tmp' &&
        mv '$file.tmp' '$file' && exec 0<&- 1>&- 2>&- && $wait_cmd" \
        </dev/null >/dev/null 2>&1 &
    disown
    for _ in $(seq 100); do
        if [[ -s $file ]]; then
            local pid
            pid=$(cat "$file")
            echo "$(proc_start "$pid") $(readlink "/proc/$pid/ns/net")" >"$file.id"
            holder_ok "$file" && return 0
            die "a namespace holder is not in a namespace of its own ($file)"
        fi
        sleep 0.05
    done
    die "a namespace holder did not start ($file)"
}

up_locked() {
    local watch=$1 d n i host cpus spid hub
    d=$(dir)
    if is_up && [[ $(cat "$d/layout") == "${ranks[*]}" ]]; then
        return 0
    fi
    down_locked # whatever is left of it, verified holders only
    mkdir -p "$d"
    n=${#ranks[@]}
    building=1 # a failure from here on: the exit trap removes it
    holder "$d/hub.pid" "$watch" --net -- 'ip link set lo up'
    hub=$(cat "$d/hub.pid")
    nsenter -t "$hub" -n ip link add br0 type bridge
    nsenter -t "$hub" -n ip link set br0 up
    {
        echo "127.0.0.1 localhost"
        for ((i = 0; i < n; i++)); do echo "$SUBNET.$((i + 1)) $name-s$i"; done
    } >"$d/hosts"
    for ((i = 0; i < n; i++)); do
        host=$name-s$i
        # A private /dev/shm: UCX's and Open MPI's shared memory stays
        # inside its server (UCX would otherwise find the "remote" peer's
        # segments and use shared memory between the servers).
        holder "$d/s$i.pid" "$watch" --net --uts --ipc --mount \
            --propagation private -- \
            "mount -t tmpfs -o mode=1777 cluster-shm /dev/shm &&
             mount --bind '$d/hosts' /etc/hosts && hostname '$host' &&
             ip link set lo up"
        spid=$(cat "$d/s$i.pid")
        ip link add eth0 netns "$spid" type veth peer name p$i netns "$hub"
        nsenter -t "$hub" -n ip link set p$i master br0 up
        nsenter -t "$spid" -n ip addr add "$SUBNET.$((i + 1))/24" dev eth0
        nsenter -t "$spid" -n ip link set eth0 up
        cpus=$(cpu_share "$i" "$n")
        echo "$cpus" >"$d/s$i.cpus"
    done
    write_agent "$d"
    echo "${ranks[*]}" >"$d/layout"
    building=0
}

# The rsh agent Open MPI calls as `agent HOST COMMAND...` (plm_rsh_agent):
# it runs COMMAND in HOST's namespaces, on HOST's CPUs.
write_agent() {
    local d=$1
    cat >"$d/agent" <<EOF
#!/bin/sh
# Written by tests/cluster/cluster.sh for cluster $name.
host=\$1; shift
i=\${host##*-s}
pid=\$(cat '$d/s'"\$i"'.pid') || exit 255
cpus=\$(cat '$d/s'"\$i"'.cpus')
if [ -n "\$cpus" ]; then
    exec nsenter -t "\$pid" -n -u -i -m --wd="\$PWD" taskset -c "\$cpus" sh -c "\$*"
fi
exec nsenter -t "\$pid" -n -u -i -m --wd="\$PWD" sh -c "\$*"
EOF
    chmod 0700 "$d/agent"
}

# Kills every process in the cluster's network namespaces (what a crashed
# or timed-out job left behind too), then the holders: only namespaces of
# holders that are still the ones recorded.
down_locked() {
    local d pid ns p f
    d=$(dir)
    [[ -d $d ]] || return 0
    for f in "$d"/s*.pid "$d"/hub.pid; do
        holder_ok "$f" || continue
        pid=$(cat "$f")
        ns=$(readlink "/proc/$pid/ns/net" 2>/dev/null) || continue
        for p in /proc/[0-9]*; do
            [[ $(readlink "$p/ns/net" 2>/dev/null) == "$ns" ]] &&
                kill -9 "${p#/proc/}" 2>/dev/null
        done
        true
    done
    rm -rf "$d"
}

# --- commands ---------------------------------------------------------------

cmd_up() {
    (($# == 1)) || die "up needs a LAYOUT"
    check || exit
    parse_layout "$1"
    name=${name:-zc}
    with_lock up_locked 0
    echo "cluster $name up: ${#ranks[@]} servers ($(IFS=,; echo "${ranks[*]}") ranks), state in $(dir)"
}

cmd_down() {
    check || exit
    name=${name:-zc}
    with_lock down_locked
}

cmd_exec() {
    (($# >= 2)) || die "exec needs SERVER and a command"
    check || exit
    name=${name:-zc}
    is_up || die "cluster $name is not up"
    local i=$1 cpus
    shift
    cpus=$(cat "$(dir)/s$i.cpus")
    nsenter -t "$(server_pid "$i")" -n -u -i -m --wd="$PWD" \
        ${cpus:+taskset -c "$cpus"} "$@"
}

cmd_status() {
    local f
    for f in "$state_root"/*/layout; do
        [[ -f $f ]] || continue
        name=${f%/layout}; name=${name##*/}
        is_up && echo "$name: ranks per server $(cat "$f")"
    done
    true
}

# Lines that fail a run (exit status BAD_EXIT, whatever the program's):
# UCX's own errors and warnings (e.g. an endpoint flushed towards a peer
# that has gone), libzcopy's and its component's, Open MPI's warning
# messages, and vader's failed single copies.
readonly BAD_LINES='UCX +(ERROR|WARN)|\[zcopy:[0-9]+\] [a-z]+ (error|warning)|coll/zcopy: |^ *WARNING:|Read -?[0-9]+, expected [0-9]+'
readonly BAD_EXIT=3

cmd_run() {
    (($# >= 2)) || die "run needs a LAYOUT and a program"
    local layout=$1 own=0 d n i total=0 hosts='' yield=0 cpus ncpu rc=0 log
    shift
    [[ ${1:-} == -- ]] && shift
    check || exit
    parse_layout "$layout"
    if [[ -z $name ]]; then
        name=zc$$
        own=1
    fi
    n=${#ranks[@]}
    if ((own)); then
        own_cluster=1
        with_lock up_locked $$
    else
        is_up || die "cluster $name is not up (cluster.sh --name $name up $layout)"
        [[ $(wc -w <"$(dir)/layout") -eq $n ]] ||
            die "cluster $name has $(wc -w <"$(dir)/layout") servers, not $n"
    fi
    d=$(dir)
    for ((i = 0; i < n; i++)); do
        total=$((total + ranks[i]))
        hosts+=${hosts:+,}$name-s$i:${ranks[i]}
        cpus=$(cat "$d/s$i.cpus")
        if [[ -z $cpus ]]; then
            yield=1
        else
            ncpu=$(awk -F, '{ print NF }' <<<"$cpus")
            ((ranks[i] > ncpu)) && yield=1
        fi
    done
    # UCX would take its cma transport (process_vm_readv) as reaching the
    # other servers: one kernel, one pid namespace. Real servers have no
    # such path, so neither does the emulation.
    local -a mpirun=(mpirun --allow-run-as-root --oversubscribe
        --host "$hosts" -np "$total" --bind-to none
        --mca plm_rsh_agent "$d/agent" --mca plm_rsh_no_tree_spawn 1
        --mca oob_tcp_if_include "$SUBNET.0/24"
        --mca btl_tcp_if_include "$SUBNET.0/24"
        --mca mpi_yield_when_idle "$yield" -x UCX_TLS=^cma)
    log=$d/run.$$.log
    run_log=$log
    ((quiet)) || echo "cluster.sh: $n servers (${ranks[*]} ranks), $name-s0: ${mpirun[*]} $*" >&2
    # mpirun on server 0, on its CPUs; the agent places the rest.
    cpus=$(cat "$d/s0.cpus")
    # In the background, so that a signal to this script stops mpirun
    # (which then ends its job) rather than wait for it.
    (
        set +e
        nsenter -t "$(server_pid 0)" -n -u -i -m --wd="$PWD" \
            ${cpus:+taskset -c "$cpus"} "${mpirun[@]}" "$@" 2>&1 | tee "$log"
        exit "${PIPESTATUS[0]}"
    ) &
    job=$!
    set +e
    wait "$job"
    rc=$?
    set -e
    job=''
    if ((rc == 0)) && grep -Eq "$BAD_LINES" "$log"; then
        echo "cluster.sh: FAIL: the output has error or warning lines:" >&2
        grep -E "$BAD_LINES" "$log" | head -n 5 >&2
        rc=$BAD_EXIT
    fi
    rm -f "$log"
    return "$rc"
}

# The one exit path: a run's mpirun stopped, a cluster made by this script
# for a run (or half made by a failed up) removed, under the lock.
job='' run_log='' own_cluster=0 building=0
on_exit() {
    local rc=$?
    [[ -n $job ]] && pkill -TERM -P "$job" 2>/dev/null && wait "$job" 2>/dev/null
    [[ -n $run_log ]] && rm -f "$run_log"
    if ((own_cluster || building)); then
        with_lock down_locked
    fi
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- main -------------------------------------------------------------------

while (($#)); do
    case $1 in
    --name) name=$2; shift 2 ;;
    --quiet) quiet=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) break ;;
    esac
done
[[ -z $name || $name =~ ^[a-z][a-z0-9]{0,15}$ ]] ||
    die "--name: a lower-case letter, then up to 15 letters or digits"
# It is quoted into the agent and the holders' shell commands.
[[ $state_root =~ ^/[A-Za-z0-9._/-]+$ ]] ||
    die "CLUSTER_STATE: an absolute path of letters, digits and ._/-"
own_netns=$(readlink /proc/self/ns/net)
cmd=${1:-}
(($#)) && shift
case $cmd in
check) check ;;
up) cmd_up "$@" ;;
run) cmd_run "$@" ;;
exec) cmd_exec "$@" ;;
down) cmd_down ;;
status) cmd_status ;;
*) usage >&2; exit 2 ;;
esac
