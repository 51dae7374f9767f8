#!/bin/bash
# Runs MPI jobs one after the other and checks that each leaves nothing
# behind: it ends with the expected status within its time, no process of
# its binary is left, no file it created remains in /dev/shm or /tmp, and
# no zcopy descriptor socket of it remains.
#
#   jobcheck.sh STEP [--- STEP ...]
#   STEP = pass|fail[=REGEX] SECONDS BINARY COMMAND [ARGS...]
#
#   pass|fail  the exit status COMMAND must have: 0, or non-zero without
#              being killed by the time limit; fail=REGEX also requires a
#              line of its output to match REGEX (grep -E), so that a job
#              failing for another reason does not count
#   SECONDS    COMMAND must end within this many seconds
#   BINARY     no process whose command line contains it may remain once
#              COMMAND has ended (given 10 s for the launcher's cleanup)
#
# Where it can (root with CAP_SYS_ADMIN, as here), the script runs itself in
# a private mount namespace with empty tmpfs on /dev/shm and /tmp, so that
# everything in them afterwards was created by the job: the check is exact
# even while other jobs run on the machine. Where it cannot (an
# unprivileged container), it compares listings of the shared directories
# and blames only entries that name zcopy or this job (its id and launcher
# pid, printed by the test as "rel-job: <jobid hex> <launcher pid>").
set -u

# Fresh tmpfs over /tmp would hide a checkout or build that lives there
# (CI may clone into /tmp): then the listings are compared instead.
under_tmp() {
    local path
    for path in "$(readlink -f "$0")" "$PWD" "$@"; do
        case $path in /tmp/*|/dev/shm/*) return 0 ;; esac
    done
    return 1
}

if [ "${REL_JOBCHECK_NS:-}" = "" ]; then
    if ! under_tmp "$@" && unshare --mount --propagation private true 2>/dev/null; then
        export REL_JOBCHECK_NS=private
        exec unshare --mount --propagation private /bin/bash -c '
            mount -t tmpfs -o mode=1777 rel-shm /dev/shm &&
            mount -t tmpfs -o mode=1777 rel-tmp /tmp &&
            exec /bin/bash "$0" "$@"' "$0" "$@"
    fi
    export REL_JOBCHECK_NS=shared
fi
echo "jobcheck: /dev/shm and /tmp are $REL_JOBCHECK_NS"

failures=0
fail() { echo "jobcheck: FAIL: $*"; failures=$((failures + 1)); }

listing() {
    if [ "$REL_JOBCHECK_NS" = private ]; then
        find /dev/shm /tmp -mindepth 1 2>/dev/null | sort
    else
        find /dev/shm /tmp -mindepth 1 -maxdepth 3 2>/dev/null | sort
    fi
}

zcopy_sockets() {
    grep -o '@zcopy\.[0-9]*\.[0-9a-f]*' /proc/net/unix 2>/dev/null | sort -u
}
run_step() {
    local expect=$1 within=$2 binary=$3
    shift 3
    local log before after new ours pattern start end rc elapsed job ppid left waited
    local sockets_before sockets_left sock pid

    log=$(mktemp)
    before=$(listing)
    sockets_before=$(zcopy_sockets)
    echo "jobcheck: running ($expect within ${within}s): $*"
    start=$(date +%s%N)
    # Into a file, not a pipe: a leftover process holding the job's stdout
    # must not keep this script waiting.
    timeout -k 10 "$within" "$@" >"$log" 2>&1
    rc=$?
    end=$(date +%s%N)
    cat "$log"
    elapsed=$(( (end - start) / 1000000 ))
    echo "jobcheck: exit status $rc after ${elapsed} ms"

    # timeout exits 124 (137 after -k); mpirun itself may exit 137 when a
    # rank was killed, so only the clock tells them apart.
    if { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && [ $elapsed -ge $((within * 1000)) ]; then
        fail "the job did not end within ${within}s"
    elif [ "$expect" = pass ] && [ "$rc" != 0 ]; then
        fail "the job failed (status $rc)"
    elif [ "$expect" != pass ] && [ "$rc" = 0 ]; then
        fail "the job should have failed but exited 0"
    elif [ "${expect#fail=}" != "$expect" ] && ! grep -qE -- "${expect#fail=}" "$log"; then
        fail "the job failed, but its output has no line matching '${expect#fail=}'"
    fi

    # The launcher reaps its children before it exits, but give a killed
    # job's stragglers a moment before calling them leftovers.
    # The binary is the first word of its processes' command lines (this
    # script's own mentions it later).
    pattern="^$(printf '%s' "$binary" | sed 's/[][\\.*^$+?(){}|]/\\&/g')( |\$)"
    waited=0
    while left=$(pgrep -f -- "$pattern") && [ $waited -lt 10 ]; do
        sleep 1
        waited=$((waited + 1))
    done
    if [ -n "$left" ]; then
        fail "processes of $binary left behind: $(echo $left)"
        ps -o pid,ppid,stat,etime,args -p "$(echo $left | tr ' ' ,)"
        kill -9 $left 2>/dev/null
    fi

    # zcopy's descriptor sockets are abstract: the kernel drops them with
    # their process, SIGKILL included. None of the job's may remain. Their
    # namespace is the machine's, so a test running alongside (ctest -j)
    # has its own: a socket whose process lives and is not this job's
    # binary (reaped above) is that test's.
    sockets_left=$(comm -13 <(echo "$sockets_before") <(zcopy_sockets) |
        while read -r sock; do
            pid=${sock#@zcopy.}
            pid=${pid%%.*}
            if [ -d "/proc/$pid" ] &&
               ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null |
                   grep -qE -- "$pattern"; then
                continue
            fi
            echo "$sock"
        done)
    if [ -n "$sockets_left" ]; then
        fail "descriptor sockets left behind: $(echo $sockets_left)"
    fi
    after=$(listing)
    new=$(comm -13 <(echo "$before") <(echo "$after"))
    if [ "$REL_JOBCHECK_NS" = private ]; then
        if [ -n "$new" ]; then
            fail "files left behind in /dev/shm or /tmp:"
            echo "$new"
        fi
    else
        read -r job ppid < <(sed -n 's/^rel-job: \([0-9a-f]*\) \([0-9]*\)$/\1 \2/p' "$log" | head -1)
        ours=$(echo "$new" | grep -E -e 'zcopy' ${job:+-e "\.$job\."} \
                                     ${ppid:+-e "/pid\.$ppid(/|$)"})
        if [ -n "$ours" ]; then
            fail "files of this job left behind in /dev/shm or /tmp:"
            echo "$ours"
        fi
    fi
    rm -f "$log"
}

step=()
for arg in "$@" ---; do
    if [ "$arg" = --- ]; then
        if [ ${#step[@]} -lt 4 ]; then
            echo "usage: jobcheck.sh pass|fail[=REGEX] SECONDS BINARY COMMAND... [--- ...]"
            exit 2
        fi
        run_step "${step[@]}"
        step=()
    else
        step+=("$arg")
    fi
done

if [ $failures -ne 0 ]; then
    echo "jobcheck: $failures failure(s)"
    exit 1
fi
echo "jobcheck: every job ended as expected and left nothing behind"
