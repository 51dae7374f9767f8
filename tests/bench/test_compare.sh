#!/usr/bin/env bash
# bench/compare.sh end to end, in seconds: a barrier and a 64-byte
# allreduce against one peer, whose summary must name the zero-copy path;
# an alltoall, a bcast and an alltoall_between against sm and han, whose
# summary must name the rows they run no algorithm of their own in, and
# (on an emulated cluster) the alltoall's estimate from alltoall_between; bench/pin_servers.sh;
# a second comparison into the same directory, which must be refused (its
# summary would have counted the first one's runs); and bench/ab.sh.
#   test_compare.sh SOURCE_DIR BUILD_DIR
set -u
src=$1 build=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {
    "$src/bench/compare.sh" --build "$build" -c barrier,allreduce -b 64 -e 64 \
        --reps 1 -n 5 --peers tuned --no-plot --out "$out/cmp" "$@"
}

if ! run >"$out/first.txt" 2>&1; then
    cat "$out/first.txt"
    echo "test_compare: FAIL: the comparison failed" >&2
    exit 1
fi
for coll in barrier allreduce; do
    if ! grep -Eq "^\| 2 \| $coll \|.*\| zcopy \|" "$out/cmp/summary.md"; then
        cat "$out/cmp/summary.md"
        echo "test_compare: FAIL: no zero-copy $coll row in the summary" >&2
        exit 1
    fi
done
# The handoff probe before each run: one row per run (zcopy, tuned).
if [[ $(grep -Ec '^2	(zcopy|tuned)	1	([0-9]+|-)$' "$out/cmp/handoff.tsv") != 2 ]]; then
    cat "$out/cmp/handoff.tsv"
    echo "test_compare: FAIL: handoff.tsv has not one row per run" >&2
    exit 1
fi
if [[ $(grep -Ec '^\| 2 \| [a-z]' "$out/cmp/summary.md") != 2 ]]; then
    cat "$out/cmp/summary.md"
    echo "test_compare: FAIL: the summary has rows of collectives not run" >&2
    exit 1
fi
# Peers' rows of other components: none against tuned; sm has no
# alltoall, and han runs none of its own on one host.
if grep -q '^Rows where a peer runs no algorithm' "$out/cmp/summary.md"; then
    cat "$out/cmp/summary.md"
    echo "test_compare: FAIL: tuned's rows said to be another component's" >&2
    exit 1
fi
if ! "$src/bench/compare.sh" --build "$build" -c alltoall,bcast,alltoall_between \
        -b 64 -e 64 --reps 1 -n 5 --peers sm,han --no-plot \
        --out "$out/cmp_sm" >"$out/sm.txt" 2>&1 ||
    ! grep -q '^Rows where .*: sm in alltoall, alltoall_between; han in alltoall, bcast, alltoall_between\.$' \
        "$out/cmp_sm/summary.md"; then
    cat "$out/sm.txt" "$out/cmp_sm/summary.md"
    echo "test_compare: FAIL: sm's alltoall(v) and han's rows not named as" \
         "another component's" >&2
    exit 1
fi
# alltoall_between moves nothing on one host: no estimate from it there;
# on an emulated cluster (where one can be made), the estimate.
if grep -q '^About the most an alltoall can gain' "$out/cmp_sm/summary.md"; then
    cat "$out/cmp_sm/summary.md"
    echo "test_compare: FAIL: an alltoall estimate from one host" >&2
    exit 1
fi
if "$src/tests/cluster/cluster.sh" check >/dev/null 2>&1; then
    if ! "$src/bench/compare.sh" --build "$build" --cluster 2x1 \
            -c alltoall,alltoall_between -b 64 -e 64 --reps 1 -n 3 \
            --peers tuned --no-plot --out "$out/cmp_cl" >"$out/cl.txt" 2>&1 ||
        ! grep -Eq '^About the most an alltoall can gain .*: np 2 64 [0-9]+\.[0-9]{2}x\.$' \
            "$out/cmp_cl/summary.md"; then
        cat "$out/cl.txt" "$out/cmp_cl/summary.md"
        echo "test_compare: FAIL: no alltoall estimate from alltoall_between" \
             "on the cluster" >&2
        exit 1
    fi
else
    echo "test_compare: no emulated cluster here; its estimate not checked"
fi
run >"$out/second.txt" 2>&1
rc=$?
if [[ $rc != 2 ]] || ! grep -q "already holds the runs" "$out/second.txt"; then
    cat "$out/second.txt"
    echo "test_compare: FAIL: a reused --out gave exit $rc, expected 2 and a refusal" >&2
    exit 1
fi
# bench/pin_servers.sh: the two ranks of each of 2 virtual servers on the
# same CPUs, and the two servers on different ones where there are two;
# a usage error or a start without mpirun refused with 2.
pins=$(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 \
    "$src/bench/pin_servers.sh" 2 sh -c 'echo "$OMPI_COMM_WORLD_RANK $(awk \
        "/^Cpus_allowed_list:/ { print \$2 }" /proc/self/status)"' |
    sort -n | awk '{ printf "%s%s", sep, $2; sep = " " }')
read -r -a pin <<<"$pins"
if ((${#pin[@]} != 4)) || [[ ${pin[0]} != "${pin[1]}" ||
                            ${pin[2]} != "${pin[3]}" ]] ||
    { (($(nproc) > 1)) && [[ ${pin[0]} == "${pin[2]}" ]]; }; then
    echo "test_compare: FAIL: pin_servers.sh put ranks 0-3 on CPUs '$pins'," \
         "expected the same per pair and, with two CPUs or more, other" \
         "ones for the second pair" >&2
    exit 1
fi
for bad in "0 true" "2"; do
    "$src/bench/pin_servers.sh" $bad >/dev/null 2>&1
    rc=$?
    if [[ $rc != 2 ]]; then
        echo "test_compare: FAIL: pin_servers.sh $bad gave exit $rc, expected 2" >&2
        exit 1
    fi
done
env -u OMPI_COMM_WORLD_LOCAL_RANK "$src/bench/pin_servers.sh" 2 true \
    2>/dev/null
rc=$?
if [[ $rc != 2 ]]; then
    echo "test_compare: FAIL: pin_servers.sh outside mpirun gave exit $rc," \
         "expected 2" >&2
    exit 1
fi
# bench/ab.sh, one build against itself: a row per collective.
if ! "$src/bench/ab.sh" "$build" "$build" 2 1 tuned -- -c barrier,allreduce \
        -b 64 -e 64 -n 5 >"$out/ab.txt" 2>&1 ||
    ! grep -Eq '^barrier +0 ' "$out/ab.txt" ||
    ! grep -Eq '^allreduce +64 ' "$out/ab.txt"; then
    cat "$out/ab.txt"
    echo "test_compare: FAIL: ab.sh gave no row per collective" >&2
    exit 1
fi
rm -rf "$(sed -n 's/^runs: //p' "$out/ab.txt")"
echo "test_compare: PASS"
