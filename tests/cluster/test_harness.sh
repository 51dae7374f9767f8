#!/usr/bin/env bash
# The emulated cluster itself: servers that are really apart, runs that
# overlap, a run that fails on an error line, and nothing left behind
# after a normal end or after SIGKILL. Exits 77 (skip) where namespaces
# cannot be made.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster=$here/cluster.sh
export CLUSTER_STATE=${CLUSTER_STATE:-/run/emulated-cluster}
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

"$cluster" check || exit $?

# Processes whose network namespace is not ours: what a cluster leaves.
foreign_procs() {
    local mine p
    mine=$(readlink /proc/self/ns/net)
    for p in /proc/[0-9]*; do
        local ns
        ns=$(readlink "$p/ns/net" 2>/dev/null) || continue
        [[ $ns != "$mine" ]] && echo "${p#/proc/} $(tr '\0' ' ' <"$p/cmdline")"
    done
}
leftover() { foreign_procs | wc -l; }
before=$(leftover)

# 1. Servers have their own host names, apart from this machine's.
out=$("$cluster" --quiet run 2x2 hostname 2>&1)
names=$(sort -u <<<"$out" | grep -c .)
if [[ $names -eq 2 ]] && ! grep -qx "$(hostname)" <<<"$out"; then
    pass "2x2: two host names, not this machine's ($(sort -u <<<"$out" | tr '\n' ' '))"
else
    fail "2x2: expected 2 host names other than $(hostname), got: $out"
fi

# 2. Apart: a file in one server's /dev/shm is not in the other's, nor
# here; a System V segment of one is not in the other's; each server has
# its own address.
name=zct$$
trap '"$cluster" --name "$name" down 2>/dev/null' EXIT
"$cluster" --name "$name" up 2x1 >/dev/null || fail "up 2x1"
"$cluster" --name "$name" up 2x1 >/dev/null || fail "up again (idempotent)"
"$cluster" --name "$name" exec 0 touch /dev/shm/cluster-probe
if "$cluster" --name "$name" exec 1 test ! -e /dev/shm/cluster-probe &&
   [[ ! -e /dev/shm/cluster-probe ]] &&
   "$cluster" --name "$name" exec 0 test -e /dev/shm/cluster-probe; then
    pass "/dev/shm is private to each server"
else
    fail "/dev/shm is shared between servers"
fi
if command -v ipcmk >/dev/null; then
    id=$("$cluster" --name "$name" exec 0 ipcmk -M 4096 | awk '{ print $NF }')
    has_segment() {
        "$cluster" --name "$name" exec "$1" ipcs -m |
            awk -v id="$id" '$2 == id { found = 1 } END { exit !found }'
    }
    if [[ -z $id ]] || has_segment 1 || ! has_segment 0; then
        fail "System V shared memory is shared between servers"
    else
        pass "System V IPC is private to each server"
    fi
fi
# The listings are read whole before matching: under pipefail, `ip | grep -q`
# fails whenever grep exits before ip has written its last line (SIGPIPE).
addr0=$("$cluster" --name "$name" exec 0 ip -o addr show)
addr1=$("$cluster" --name "$name" exec 1 ip -o addr show)
if grep -q "169.254.77.1/" <<<"$addr0" && grep -q "169.254.77.2/" <<<"$addr1"; then
    pass "each server has its own address on the cluster's link"
else
    fail "addresses on the cluster's link: server 0: $addr0; server 1: $addr1"
fi
"$cluster" --name "$name" down
[[ ! -e $CLUSTER_STATE/$name ]] || fail "down left $CLUSTER_STATE/$name"

# 3. Two runs at once, each on a cluster of its own.
"$cluster" --quiet run 2x1 sh -c 'sleep 2; hostname' >/tmp/zct$$.a 2>&1 &
a=$!
"$cluster" --quiet run 2x1 sh -c 'sleep 2; hostname' >/tmp/zct$$.b 2>&1 &
b=$!
if wait "$a" && wait "$b" && [[ $(cat /tmp/zct$$.a /tmp/zct$$.b | sort -u | wc -l) -eq 4 ]]; then
    pass "two overlapping runs, four servers"
else
    fail "overlapping runs: $(cat /tmp/zct$$.a /tmp/zct$$.b)"
fi
rm -f /tmp/zct$$.a /tmp/zct$$.b

# 4. A run whose output has a UCX error line fails, though its program
# exits 0.
if "$cluster" --quiet run 2x1 sh -c 'echo "[1] [h:1] flush.c:26 UCX  ERROR x"' \
    >/dev/null 2>&1; then
    fail "a UCX ERROR line did not fail the run"
else
    pass "a UCX ERROR line fails the run"
fi

# 5. SIGKILL of a run mid-job: within seconds nothing of it remains.
"$cluster" --quiet run 2x1 sleep 60 >/dev/null 2>&1 &
victim=$!
for _ in $(seq 50); do
    (($(leftover) > before)) && break
    sleep 0.2
done
(($(leftover) > before)) || fail "the run to kill never started"
kill -9 "$victim"
wait "$victim" 2>/dev/null
for _ in $(seq 50); do
    (($(leftover) <= before)) && break
    sleep 0.2
done
if (($(leftover) <= before)); then
    pass "SIGKILL of a run: its processes and namespaces are gone"
else
    fail "after SIGKILL, still running: $(foreign_procs)"
fi

# Nothing left: no process in another network namespace, no state.
if (($(leftover) > before)); then
    fail "left behind: $(foreign_procs)"
fi
left=$(find "$CLUSTER_STATE" -mindepth 1 -maxdepth 1 -name 'zc*' 2>/dev/null | wc -l)
((left == 0)) || fail "state left in $CLUSTER_STATE: $(ls "$CLUSTER_STATE")"
if command -v ip >/dev/null && [[ -n $(ip netns list 2>/dev/null) ]]; then
    fail "ip netns lists: $(ip netns list)"
fi

((failures == 0)) && echo "all harness checks passed"
exit $((failures > 0))
