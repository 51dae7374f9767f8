#!/usr/bin/env bash
# Two servers of two ranks on one CPU each (the first two CPUs this script
# may use): zcopy must see that its ranks share their CPU and yield in its
# waits; it used to spin (a scheduler tick per wait). Exits 77 where the
# cluster cannot be made or fewer than two CPUs are allowed.
#   test_yield.sh TEST_TOPOLOGY
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$here/cluster.sh" check || exit $?
mapfile -t cpus < <(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' |
                    awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) print c }')
if ((${#cpus[@]} < 2)); then
    echo "test_yield: SKIP: fewer than 2 CPUs allowed" >&2
    exit 77
fi
out=$(taskset -c "${cpus[0]},${cpus[1]}" "$here/cluster.sh" --quiet run 2x2 \
      --mca coll_zcopy_verbose 10 "$1" --cluster 2>&1)
rc=$?
echo "$out"
fail=0
if ((rc != 0)); then
    echo "test_yield: FAIL: the run exited $rc" >&2
    fail=1
fi
if ! grep -q "2 ranks share 1 CPU: waits yield the processor" <<<"$out"; then
    echo "test_yield: FAIL: no server's waits yield" >&2
    fail=1
fi
if grep -q "waits spin" <<<"$out"; then
    echo "test_yield: FAIL: some waits spin" >&2
    fail=1
fi
exit "$fail"
