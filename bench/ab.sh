#!/usr/bin/env bash
# ab.sh: one build of zcopy against another (before and after a change),
# interleaved, each with its own zcopy_bench and component, optionally with
# stock peers in the same rotation; prints per collective and size the
# median time of each and the ratios base/new and best peer/new.
#
#   bench/ab.sh BASE_BUILD NEW_BUILD NP REPS [PEERS] -- ZCOPY_BENCH_ARGS
#   bench/ab.sh /tmp/base/build build 4 5 tuned,han -- -c all -b 1K -e 32K -f 2 -n 100
#
# PEERS: comma-separated stock components (tuned, sm, han, adapt), run
# with NEW_BUILD's bench and --mca coll ^zcopy; "" for none. The results
# stay in a new directory under ${TMPDIR:-/tmp} (printed at the end).
set -euo pipefail

(($# >= 5)) && [[ $5 == -- || ${6-} == -- ]] ||
    { sed -n 2,12p "$0" >&2; exit 2; }
base=$1 new=$2 np=$3 reps=$4
peers=''
if [[ $5 == -- ]]; then shift 5; else peers=$5; shift 6; fi
out=$(mktemp -d "${TMPDIR:-/tmp}/ab.XXXXXX")
IFS=, read -r -a peer_list <<<"$peers"
[[ -x $base/bench/zcopy_bench && -x $new/bench/zcopy_bench ]] ||
    { echo "ab.sh: no bench/zcopy_bench under $base or $new" >&2; exit 2; }

run() { # mode build extra-mpirun-args...
    local mode=$1 build=$2 rep=$3
    shift 3
    OMPI_MCA_mca_base_component_path=SYS_DEFAULT:$build/components \
        mpirun --allow-run-as-root --oversubscribe -np "$np" "$@" \
        "$build/bench/zcopy_bench" "${bench_args[@]}" \
        --csv "$out/$mode.$rep.csv" </dev/null >"$out/$mode.$rep.log" 2>&1 ||
        { echo "ab.sh: run $mode $rep failed: $out/$mode.$rep.log" >&2; exit 1; }
}

bench_args=("$@")
for ((rep = 1; rep <= reps; rep++)); do
    run base "$base" "$rep"
    run new "$new" "$rep"
    for p in "${peer_list[@]}"; do
        extra=(--mca coll ^zcopy)
        [[ $p != tuned ]] && extra+=(--mca "coll_${p}_priority" 100)
        run "$p" "$new" "$rep" "${extra[@]}"
    done
done

python3 - "$out" "$peers" <<'PY'
import collections, csv, glob, statistics, sys
out, peers = sys.argv[1], [p for p in sys.argv[2].split(',') if p]
times = collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(out + '/*.csv'):
    mode = f.rsplit('/', 1)[1].split('.')[0]
    for row in csv.DictReader(open(f)):
        times[(row['collective'], int(row['bytes']))][mode].append(
            float(row['time_us']))
print('%-22s %9s %9s %9s %9s %-6s %7s %9s' % ('collective', 'bytes', 'base us',
      'new us', 'best us', 'peer', 'base/new', 'best/new'))
for key in sorted(times):
    med = {m: statistics.median(v) for m, v in times[key].items()}
    best = min(peers, key=lambda p: med.get(p, float('inf'))) if peers else ''
    b, n = med['base'], med['new']
    bp = med.get(best, float('nan'))
    print('%-22s %9d %9.2f %9.2f %9.2f %-6s %7.2f %9.2f' %
          (key[0], key[1], b, n, bp, best, b / n, bp / n))
PY
echo "runs: $out"
