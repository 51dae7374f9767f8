#!/usr/bin/env bash
# compare.sh: zcopy against stock Open MPI, same binary, same activated
# buffers. Runs zcopy_bench with zcopy and with each stock component asked
# for (the peers), interleaved, each rep starting one mode later (zcopy,
# tuned, han, tuned, han, zcopy, ...) so that drift of the machine and the
# place in a rotation hit all alike, then prints per collective
# and size the median time of each, the best peer and zcopy's ratio to it,
# the path zcopy took, and both as a fraction of a memory-bandwidth
# roofline. On one machine, or on an emulated cluster (--cluster).
#
# Needs bash, awk (mawk is enough), sort, mpirun; gnuplot for the charts.
# See bench/README.md for the columns and the roofline.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
    cat <<'EOF'
usage: bench/compare.sh [options] [-- extra zcopy_bench options]
  -c, --collectives LIST  comma-separated, or all [all]
  -b SIZE                 smallest size [16]
  -e SIZE                 largest size [64M]
  -f N                    size factor [4]
  -t TYPE, -o OP          datatype and op of the runs [int32, sum]
  -n N, -w N              timed and warm-up iterations per run [20, 5]
  --reps N                runs per mode and process count [5]
  --np LIST, -np LIST     process counts, comma-separated [2]; e.g. 2,4
  --build DIR             build tree with bench/zcopy_bench and
                          components/ [./build]
  --bench FILE            zcopy_bench to run [BUILD/bench/zcopy_bench]
  --out DIR               results [BUILD/bench-results/<timestamp>]
  --mpirun-args "ARGS"    more mpirun arguments (e.g. "--bind-to core")
  --wrap "CMD"            a command each rank runs the bench under, e.g.
                          "build/tests/confined/confined_run docker"
  --buffers KIND          activated, huge, alloc_mem, malloc or plain
                          [activated]; alloc_mem: MPI_Alloc_mem with
                          mpool_hints=zcopy (mpool/zcopy activates it, for
                          every mode); malloc measures what the component
                          costs a job that never activates memory (every
                          call falls back)
  --peers LIST            stock components to run against, comma-separated,
                          from tuned, sm, han, adapt [all four; tuned,han
                          with --cluster]
  --cluster LAYOUT        run on an emulated cluster (tests/cluster/, root
                          only): SxR servers x ranks, or ranks per server
                          (2,1,1); replaces --np
  --no-plot               no charts even when gnuplot is installed
  -h, --help              this text
Modes: zcopy (the component on the search path) and each peer (--mca coll
^zcopy, and the peer's priority raised to 100 but for tuned, Open MPI's
default); all on the same kind of buffers (by default one activated arena).
Writes per-run CSVs and logs, rows.tsv, handoff.tsv, summary.md, summary.csv and
busbw-<collective>.png into the output directory.
EOF
}

die() { echo "compare.sh: $*" >&2; exit 2; }

# ---------------------------------------------------------------------------
# Options

colls=all minb=16 maxb=64M factor=4 dtype=int32 op=sum iters=20 warmup=5
reps=5 nps=2 build=./build bench='' out='' mpirun_args='' plot=1
buffers=activated peers='' cluster='' wrap=''
extra=()
while (($#)); do
    case $1 in
    -c|--collectives) colls=$2; shift ;;
    -b) minb=$2; shift ;;
    -e) maxb=$2; shift ;;
    -f) factor=$2; shift ;;
    -t) dtype=$2; shift ;;
    -o) op=$2; shift ;;
    -n) iters=$2; shift ;;
    -w) warmup=$2; shift ;;
    --reps) reps=$2; shift ;;
    --np|-np) nps=$2; shift ;;
    --build) build=$2; shift ;;
    --bench) bench=$2; shift ;;
    --out) out=$2; shift ;;
    --mpirun-args) mpirun_args=$2; shift ;;
    --wrap) wrap=$2; shift ;;
    --buffers) buffers=$2; shift ;;
    --peers) peers=$2; shift ;;
    --cluster) cluster=$2; shift ;;
    --no-plot) plot=0 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) usage >&2; die "unknown option $1" ;;
    esac
    shift
done

[[ $reps =~ ^[1-9][0-9]*$ ]] || die "--reps needs a positive integer"
[[ $buffers =~ ^(activated|huge|alloc_mem|malloc|plain)$ ]] ||
    die "--buffers is activated, huge, alloc_mem, malloc or plain"
[[ $nps =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "bad --np list: $nps"
peers=${peers:-$([[ -n $cluster ]] && echo tuned,han || echo tuned,sm,han,adapt)}
[[ $peers =~ ^(tuned|sm|han|adapt)(,(tuned|sm|han|adapt))*$ ]] ||
    die "--peers: a comma-separated list of tuned, sm, han, adapt"
IFS=, read -r -a peer_list <<<"$peers"
[[ $(printf '%s\n' "${peer_list[@]}" | sort -u | wc -l) -eq ${#peer_list[@]} ]] ||
    die "--peers: each peer once"
cluster_sh=$here/../tests/cluster/cluster.sh
if [[ -n $cluster ]]; then
    [[ $cluster =~ ^([1-9][0-9]*x[1-9][0-9]*|[1-9][0-9]*(,[1-9][0-9]*)+)$ ]] ||
        die "--cluster: SxR (e.g. 2x2) or ranks per server (e.g. 2,1,1)"
    if [[ $cluster == *x* ]]; then
        nps=$((${cluster%x*} * ${cluster#*x}))
    else
        nps=$(tr , '\n' <<<"$cluster" | awk '{ n += $1 } END { print n }')
    fi
    "$cluster_sh" check || die "--cluster: no emulated cluster on this machine"
fi
bench=${bench:-$build/bench/zcopy_bench}
[[ -x $bench ]] || die "no $bench: build first (cmake --build $build)"
components=$build/components
# The cache-line handoff between two CPUs, before every run (zcopy_handoff.c:
# on a VM it changes while a benchmark runs, and small collectives with it).
handoff=${bench%/*}/zcopy_handoff
[[ -x $handoff ]] || handoff=$build/bench/zcopy_handoff
[[ -d $components ]] || echo "compare.sh: no $components; zcopy mode uses" \
    "the installed component" >&2
out=${out:-$build/bench-results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
# The summary reads every run's CSV in the directory: runs of an earlier
# comparison there would be counted with these.
for old in "$out"/np*-*-rep*.csv; do
    [[ -e $old ]] && die "--out $out already holds the runs of a comparison; give a new directory"
done
((reps >= 5)) || echo "compare.sh: note: $reps repetitions; use --reps 5 or" \
    "more for numbers worth quoting" >&2
if [[ $colls == all ]]; then
    colls=allreduce,reduce,reduce_scatter_block,allgather,bcast,alltoall,gather,scatter,barrier
fi

# ---------------------------------------------------------------------------
# Runs

# The MCA arguments of a mode: zcopy as installed or built, or a stock
# component without zcopy (tuned wins by its default priority).
mode_mca() {
    case $1 in
    zcopy) ;;
    tuned) echo "--mca coll ^zcopy" ;;
    *) echo "--mca coll ^zcopy --mca coll_$1_priority 100" ;;
    esac
}

# One cluster for every run of a --cluster comparison (set up once; its
# CPUs and addresses stay the same throughout), removed at exit.
cluster_name=''
if [[ -n $cluster ]]; then
    cluster_name=zcb$$
    trap '"$cluster_sh" --name "$cluster_name" down' EXIT
    "$cluster_sh" --name "$cluster_name" up "$cluster" >&2
fi

# launch NP ARGS...: mpirun here, or from the cluster's first server.
launch() {
    local np=$1
    shift
    if [[ -n $cluster ]]; then
        "$cluster_sh" --name "$cluster_name" --quiet run "$cluster" "$@"
    else
        mpirun --allow-run-as-root --oversubscribe -np "$np" "$@"
    fi
}

# run_one NP MODE REP: one mpirun; the CSV holds the collectives and the
# memcpy rows of the roofline, measured in the same job.
run_one() {
    local np=$1 mode=$2 rep=$3 name="np$1-$2-rep$3" rc=0
    # shellcheck disable=SC2046,SC2086 # mode_mca, mpirun_args split on purpose
    OMPI_MCA_mca_base_component_path="SYS_DEFAULT:$components" \
        launch "$np" $(mode_mca "$mode") \
        $mpirun_args $wrap "$bench" -c "$colls,memcpy" -b "$minb" -e "$maxb" \
        -f "$factor" -t "$dtype" -o "$op" -n "$iters" -w "$warmup" \
        --buffers "$buffers" --no-progress --csv "$out/$name.csv" \
        "${extra[@]}" >"$out/$name.log" 2>&1 || rc=$?
    # 1: the bench found wrong results (counted in the CSV); 3: the
    # cluster's run had UCX, Open MPI or zcopy error lines; others: broken.
    if ((rc == 3)); then
        grep -E 'UCX +(ERROR|WARN)|zcopy.*(error|warning)|WARNING:' \
            "$out/$name.log" | head -n 5 >&2
        die "run $name printed error or warning lines; log: $out/$name.log"
    fi
    if ((rc != 0 && rc != 1)) || [[ ! -s $out/$name.csv ]]; then
        tail -n 20 "$out/$name.log" >&2
        die "run $name failed (exit $rc); log: $out/$name.log"
    fi
}

IFS=, read -r -a np_list <<<"$nps"
modes=(zcopy "${peer_list[@]}")
total=$((${#np_list[@]} * reps * ${#modes[@]})) done_runs=0 started=$SECONDS
for np in "${np_list[@]}"; do
    for ((rep = 1; rep <= reps; rep++)); do
        # Each rep starts one mode later: on the emulated cluster a job
        # ran faster first in its rotation than second (bench/README.md).
        for ((k = 0; k < ${#modes[@]}; k++)); do
            mode=${modes[(k + rep - 1) % ${#modes[@]}]}
            done_runs=$((done_runs + 1))
            printf '[%d/%d] np %d %-5s rep %d/%d (%ds elapsed)\n' \
                "$done_runs" "$total" "$np" "$mode" "$rep" "$reps" \
                $((SECONDS - started)) >&2
            if [[ -x $handoff ]]; then
                printf '%s\t%s\t%s\t%s\n' "$np" "$mode" "$rep" \
                    "$("$handoff" 2>/dev/null || echo -)" >>"$out/handoff.tsv"
            fi
            run_one "$np" "$mode" "$rep"
        done
    done
done

# ---------------------------------------------------------------------------
# Summary

# rows.tsv: np, collective, bytes, mode, time_us, busbw*time (constant for a
# row: it turns any time of that row into its busbw), errors, path. memcpy
# does not depend on the mode: its runs pool as mode "any".
for csv in "$out"/np*-*-rep*.csv; do
    base=${csv##*/}
    mode=${base#np*-}
    mode=${mode%%-rep*}
    awk -F, -v OFS='\t' -v mode="$mode" '
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        {
            path = $col["path"]
            for (i = col["path"] + 1; i <= NF; i++) path = path "," $i
            m = $col["collective"] == "memcpy" ? "any" : mode
            print $col["np"], $col["collective"], $col["bytes"], m,
                  $col["time_us"], $col["busbw_GBps"] * $col["time_us"],
                  $col["errors"], path
        }' "$csv"
done >"$out/rows.tsv"

# medians.tsv: np, collective, bytes, mode, median time_us, busbw at that
# time, runs, errors over the runs, the path (or "varies: a | b").
sort -t "$(printf '\t')" -k1,1n -k2,2 -k3,3n -k4,4 -k5,5g "$out/rows.tsv" |
awk -F'\t' -v OFS='\t' '
    function flush(   med, paths) {
        if (n == 0) return
        med = n % 2 ? t[(n + 1) / 2] : (t[n / 2] + t[n / 2 + 1]) / 2
        paths = npaths == 1 ? p[1] : "varies:"
        if (npaths > 1) for (i = 1; i <= npaths; i++) paths = paths " " p[i]
        print key, med, (med > 0 ? k / med : 0), n, err, paths
        n = 0; npaths = 0; err = 0
    }
    {
        id = $1 OFS $2 OFS $3 OFS $4
        if (id != key) { flush(); key = id }
        t[++n] = $5; k = $6; err += $7
        seen = 0
        for (i = 1; i <= npaths; i++) if (p[i] == $8) seen = 1
        if (!seen) p[++npaths] = $8
    }
    END { flush() }' >"$out/medians.tsv"

# The roofline. Minimum memory traffic T (bytes read plus bytes written,
# over all ranks) of each collective of size S on n ranks, out of place:
#   allreduce             2nS     every input read once, n outputs written
#   reduce                (n+1)S  n inputs read, one output written
#   reduce_scatter_block  (n+1)S  n inputs of S read, n outputs of S/n written
#   allgather             (n+1)S  n pieces of S/n read, n outputs of S written
#   bcast                 nS      the root's S read, n-1 copies written
#   alltoall              2nS     n inputs of S read, n outputs of S written
#   gather, scatter       2S      S read, S written
# A memcpy of B bytes reads B and writes B, so the roofline time is
# T / (2 BW), BW the aggregate memcpy rate (bytes copied per second by all
# ranks together) measured in the same jobs with every rank copying its even
# share T / 2n at once: the roofline is the time of that memcpy. (BW comes
# from the largest measured memcpy size not above the share.) For allreduce
# the share is S: the time of every rank copying its own S bytes at once.
awk -F'\t' -v OFS='\t' -v order="$colls" -v peers="$peers" '
    BEGIN {
        nc = split(order, names, ",")
        for (i = 1; i <= nc; i++) rank_of[names[i]] = i
        np_ = split(peers, peer, ",")
    }
    function traffic(c, s, n) {
        if (c == "allreduce" || c == "alltoall") return 2 * n * s
        if (c == "reduce" || c == "reduce_scatter_block" || c == "allgather")
            return (n + 1) * s
        if (c == "bcast") return n * s
        if (c == "gather" || c == "scatter") return 2 * s
        return 0
    }
    # Aggregate memcpy rate at np n for a per-rank copy of s bytes: from the
    # largest measured size not above s (else the smallest), in bytes per
    # microsecond.
    function memcpy_rate(n, s,   i, best, bs, smin) {
        best = -1; smin = -1; bs = 0
        for (i = 1; i <= nm; i++) {
            if (mnp[i] != n) continue
            if (mb[i] <= s && mb[i] > bs) { best = i; bs = mb[i] }
            if (smin < 0 || mb[i] < mb[smin]) smin = i
        }
        if (best < 0) best = smin
        if (best < 0 || mt[best] <= 0) return 0
        return n * mb[best] / mt[best]
    }
    $4 == "any" { nm++; mnp[nm] = $1; mb[nm] = $3; mt[nm] = $5; next }
    {
        id = $1 OFS $2 OFS $3
        if (!(id in seen)) { seen[id] = 1; ids[++nids] = id }
        time[id, $4] = $5; bw[id, $4] = $6; path[id, $4] = $9
        err[id] += $8
    }
    END {
        for (i = 1; i <= nids; i++) {
            split(ids[i], f, OFS)
            T = traffic(f[2], f[3], f[1])
            rate = memcpy_rate(f[1], T / (2 * f[1]))
            roof = rate > 0 && T > 0 ? T / (2 * rate) : 0
            z = time[ids[i], "zcopy"]
            best = ""; b = 0; times = ""
            for (j = 1; j <= np_; j++) {
                t = time[ids[i], peer[j]] + 0
                times = times OFS t
                if (t > 0 && (b == 0 || t < b)) { b = t; best = peer[j] }
            }
            print f[1], rank_of[f[2]] + 0, f[2], f[3], z times, best, b,
                  (z > 0 ? b / z : 0), path[ids[i], "zcopy"], roof,
                  (z > 0 ? roof / z : 0), (b > 0 ? roof / b : 0),
                  bw[ids[i], "zcopy"], bw[ids[i], best],
                  (roof > 0 ? bw[ids[i], "zcopy"] * z / roof : 0), err[ids[i]]
        }
    }' "$out/medians.tsv" |
    sort -t "$(printf '\t')" -k1,1n -k2,2n -k4,4n |
    cut -f1,3- >"$out/summary.tsv"
# summary.tsv: np, collective, bytes, zcopy_us, one <peer>_us per peer,
# best peer, best_us, best/zcopy, zcopy path, roofline_us, zcopy roof
# fraction, best roof fraction, zcopy busbw, best busbw, roofline busbw,
# errors

{
    printf 'np,collective,bytes,zcopy_us'
    for p in "${peer_list[@]}"; do printf ',%s_us' "$p"; done
    echo ",best_peer,best_us,best_over_zcopy,zcopy_path,roofline_us,zcopy_roof_fraction,best_roof_fraction,zcopy_busbw_GBps,best_busbw_GBps,roofline_busbw_GBps,errors"
    tr '\t' , <"$out/summary.tsv"
} >"$out/summary.csv"

# The table: aligned text on stdout, markdown in summary.md.
table() {
    awk -F'\t' -v md="$1" -v peers="$peers" '
        function human(b,   u, i) {
            split("K M G T", u, " ")
            for (i = 0; b >= 1024 && b % 1024 == 0 && i < 4; i++) b /= 1024
            return i ? b u[i] : b
        }
        function num(v, fmt) { return v > 0 ? sprintf(fmt, v) : "-" }
        function pct(v) { return v > 0 ? sprintf("%.0f%%", 100 * v) : "-" }
        # cell[1..nf], printed as a markdown row or aligned text; the path
        # (cell[pathc]) goes last in the text form, being the widest.
        function row(   i, line) {
            line = ""
            if (md) {
                for (i = 1; i <= nf; i++) line = line "| " cell[i] " "
                print line "|"
                return
            }
            for (i = 1; i <= nf; i++)
                if (i != pathc)
                    line = line sprintf(i == 2 ? "%-20s " : i == 1 ? "%-3s " : "%10s ", cell[i])
            print line " " cell[pathc]
        }
        BEGIN {
            np_ = split(peers, peer, ",")
            nf = 0
            cell[++nf] = "np"; cell[++nf] = "collective"; cell[++nf] = "size"
            cell[++nf] = "zcopy us"
            for (j = 1; j <= np_; j++) cell[++nf] = peer[j] " us"
            cell[++nf] = "best"; cell[++nf] = "best/zcopy"
            cell[++nf] = "path (zcopy runs)"; pathc = nf
            cell[++nf] = "roofline us"; cell[++nf] = "zcopy %roof"
            cell[++nf] = "best %roof"; cell[++nf] = "errors"
            row()
            if (md) {
                line = "|---|---|"
                for (i = 3; i <= nf; i++) line = line (i == pathc ? "---|" : "--:|")
                print line
            }
        }
        {
            nf = 0; k = 4
            cell[++nf] = $1; cell[++nf] = $2; cell[++nf] = human($3)
            cell[++nf] = num($4, "%.2f")
            for (j = 1; j <= np_; j++) cell[++nf] = num($(k + j), "%.2f")
            k += np_
            cell[++nf] = $(k + 1); cell[++nf] = num($(k + 3), "%.2f")
            cell[++nf] = $(k + 4); pathc = nf
            cell[++nf] = num($(k + 5), "%.2f"); cell[++nf] = pct($(k + 6))
            cell[++nf] = pct($(k + 7)); cell[++nf] = $(k + 11)
            row()
        }' "$out/summary.tsv"
}

memcpy_table() {
    awk -F'\t' '$4 == "any" {
        printf "| %s | %s | %.2f | %.2f |\n", $1, $3, $5, $1 * $3 / $5 / 1000
    }' "$out/medians.tsv"
}

# A line on the cache-line handoffs seen before the runs: their range, and
# the runs that saw more than twice the fastest (a machine whose state
# changed during the comparison).
handoff_summary() {
    [[ -s $out/handoff.tsv ]] || return 0
    awk -F'\t' '
        $4 ~ /^[0-9]+$/ { n++; v[n] = $4 + 0; run[n] = "np" $1 "-" $2 "-rep" $3
                          if (n == 1 || $4 + 0 < lo) lo = $4 + 0
                          if ($4 + 0 > hi) hi = $4 + 0 }
        END {
            if (n == 0) exit
            slow = ""; k = 0
            for (i = 1; i <= n; i++)
                if (v[i] > 2 * lo) { k++; slow = slow (k > 1 ? ", " : "") run[i] }
            printf "Cache-line handoff between two CPUs before each run " \
                   "(bench/zcopy_handoff, handoff.tsv): %d-%d ns", lo, hi
            if (k > 0)
                printf "; %d of %d runs saw more than twice the fastest " \
                       "(%s): the machine changed during the comparison " \
                       "(the probe takes 0.1 s before its run; the state " \
                       "can change within a run too)", k, n, slow
            printf ".\n\n"
        }' "$out/handoff.tsv"
}

# A line naming the rows where a peer runs another component's algorithm:
# Open MPI 4.1's sm, han and adapt define only some collectives (the
# functions their modules set; nm -D lists sm's and han's), and a
# collective a module leaves out goes to the next component by priority,
# tuned under these modes. Their comm_query also turns whole communicators
# away (coll_base_verbose 30 says so): han one whose ranks are all on one
# host, sm one that spans hosts. The best of two peers' medians in such a
# row is then partly the spread of one algorithm's jobs.
borrowed_summary() {
    local p c own line='' missing cl
    [[ $ompi_version == *' 4.1.'* ]] || return 0
    IFS=, read -r -a cl <<<"$colls"
    for p in "${peer_list[@]}"; do
        case $p in
            sm) own=' allreduce barrier bcast reduce ' ;;
            han) own=' allgather allreduce barrier bcast gather reduce'
                 own+=' scatter ' ;;
            adapt) own=' bcast reduce ' ;;
            *) continue ;;
        esac
        if [[ $p == sm && -n $cluster ]] || [[ $p == han && -z $cluster ]]; then
            own=' '
        fi
        missing=''
        for c in "${cl[@]}"; do
            [[ $c == memcpy || $own == *" $c "* ]] ||
                missing+="${missing:+, }$c"
        done
        if [[ -n $missing ]]; then
            line+="${line:+; }$p in $missing"
        fi
    done
    [[ -n $line ]] || return 0
    echo "Rows where a peer runs no algorithm of its own (Open MPI 4.1)," \
         "so that its column is the next component's (tuned's):" \
         "$line."
}

# With alltoall and alltoall_between rows at the same np and size, on a
# cluster (on one host alltoall_between moves nothing): the best peer's
# alltoall over the best peer's alltoall_between (the same call with the
# blocks inside each host left out). An alltoall whose blocks between
# hosts move through the point-to-point engine takes about the second at
# least, so this ratio estimates the most such an alltoall, zcopy's
# pushes included, can gain over the best peer (bench/README.md).
between_summary() {
    [[ -n $cluster ]] || return 0
    awk -F'\t' -v np_="${#peer_list[@]}" '
        function human(b,   u, i) {
            split("K M G T", u, " ")
            for (i = 0; b >= 1024 && b % 1024 == 0 && i < 4; i++) b /= 1024
            return i ? b u[i] : b
        }
        $2 == "alltoall" { full[$1 SUBSEP $3] = $(4 + np_ + 2) }
        $2 == "alltoall_between" { part[$1 SUBSEP $3] = $(4 + np_ + 2)
                                   order[++n] = $1 SUBSEP $3 }
        END {
            for (i = 1; i <= n; i++) {
                k = order[i]
                if (!(k in full) || full[k] <= 0 || part[k] <= 0) continue
                split(k, f, SUBSEP)
                line = line (line == "" ? "" : ", ") "np " f[1] " " human(f[2]) \
                       " " sprintf("%.2fx", full[k] / part[k])
            }
            if (line != "")
                print "About the most an alltoall can gain over the best " \
                      "peer while its blocks between hosts move through " \
                      "the point-to-point engine, the best peer'"'"'s " \
                      "alltoall time over the best peer'"'"'s " \
                      "alltoall_between time: " line "."
        }' "$out/summary.tsv"
}

ompi_version=$(mpirun --version 2>/dev/null | head -n 1 || true)
where="np $nps"
[[ -n $cluster ]] && where="an emulated cluster of $cluster (servers x ranks or ranks per server, tests/cluster/: tcp between servers on one machine), np $nps"
# What an iteration's time is: zcopy_bench --timing after "--", the last
# one given (as getopt takes it).
timing=start
for ((i = 0; i < ${#extra[@]}; i++)); do
    case ${extra[i]} in
        --timing) timing=${extra[i + 1]:-start} ;;
        --timing=*) timing=${extra[i]#--timing=} ;;
    esac
done
case $timing in
    osu) iteration="calls back to back, each followed by the mode's MPI_Barrier; an iteration's time is the mean of the ranks' calls, OSU's per-call figure; memcpy and the roofline still from the slowest rank after the bench's own barrier" ;;
    loop) iteration="calls back to back; an iteration is a call and the MPI_Barrier after it, as long as its slowest rank; memcpy and the roofline from the bench's own barrier" ;;
    *) iteration="an iteration lasts as long as its slowest rank" ;;
esac
{
    echo "# zcopy against stock Open MPI (${peers//,/, })"
    echo
    echo "$(date '+%Y-%m-%d %H:%M:%S'), $(uname -n), $ompi_version," \
         "$(nproc) cores; $where, $reps runs per mode (interleaved)," \
         "sizes $minb..$maxb x$factor, $dtype $op, $iters iterations" \
         "($warmup warm-up), $buffers buffers${extra[*]:+, extra: ${extra[*]}}${mpirun_args:+, mpirun: $mpirun_args}${wrap:+, under: $wrap}."
    echo
    echo "Times are medians over the runs of each run's median iteration" \
         "($iteration). best: the peer" \
         "with the lowest median; best/zcopy > 1: zcopy is faster than every" \
         "peer. %roof: the roofline time as a percentage of the measured" \
         "time (100% = moving the minimum bytes at the aggregate memcpy" \
         "bandwidth of all ranks). See bench/README.md."
    echo
    table 1
    echo
    borrowed=$(borrowed_summary)
    [[ -z $borrowed ]] || printf '%s\n\n' "$borrowed"
    between=$(between_summary)
    [[ -z $between ]] || printf '%s\n\n' "$between"
    handoff_summary
    echo "Aggregate memcpy bandwidth, every rank copying at once:"
    echo
    echo "| np | bytes per rank | median us | aggregate GB/s |"
    echo "|--:|--:|--:|--:|"
    memcpy_table
} >"$out/summary.md"

echo
table 0
[[ -z $borrowed ]] || printf '\n%s\n' "$borrowed"
[[ -z $between ]] || printf '\n%s\n' "$between"

# ---------------------------------------------------------------------------
# Charts: busbw against size, one per collective, one line per mode and np.

plot_charts() {
    local term=png coll dat ncol
    # Read whole before matching: `gnuplot | grep -q` fails under pipefail
    # when grep exits first and gnuplot gets SIGPIPE.
    if grep -qw pngcairo <<<"$(gnuplot -e 'set terminal' 2>&1)"; then
        term=pngcairo
    fi
    IFS=, read -r -a coll_list <<<"$colls"
    for coll in "${coll_list[@]}"; do
        [[ $coll == barrier ]] && continue # no bandwidth to draw
        dat="$out/busbw-$coll.dat"
        awk -F'\t' -v OFS='\t' -v coll="$coll" -v nps="$nps" -v peers="$peers" '
            function human(b,   u, i) {
                split("K M G T", u, " ")
                for (i = 0; b >= 1024 && b % 1024 == 0 && i < 4; i++) b /= 1024
                return i ? b u[i] : b
            }
            function v(x) { return x > 0 ? x : "?" }
            BEGIN { nn = split(nps, np, ","); npe = split(peers, peer, ",") }
            # medians.tsv: np, collective, bytes, mode, time, busbw, ...
            FNR == NR && $2 == coll && $4 != "any" {
                if (!($3 in seen)) { seen[$3] = 1; sizes[++ns] = $3 }
                bw[$3, $1, $4] = $6
            }
            # the roofline busbw comes from summary.tsv
            FNR != NR && $2 == coll { r[$3, $1] = $(NF - 1) }
            END {
                printf "bytes\tlabel"
                for (j = 1; j <= nn; j++) {
                    printf "\tzcopy np%s", np[j]
                    for (k = 1; k <= npe; k++) printf "\t%s np%s", peer[k], np[j]
                    printf "\troofline np%s", np[j]
                }
                printf "\n"
                for (i = 1; i <= ns; i++) {
                    b = sizes[i]
                    printf "%s\t%s", b, human(b)
                    for (j = 1; j <= nn; j++) {
                        printf "\t%s", v(bw[b, np[j], "zcopy"])
                        for (k = 1; k <= npe; k++)
                            printf "\t%s", v(bw[b, np[j], peer[k]])
                        printf "\t%s", v(r[b, np[j]])
                    }
                    printf "\n"
                }
            }' "$out/medians.tsv" "$out/summary.tsv" >"$dat"
        ncol=$(head -n 1 "$dat" | awk -F'\t' '{ print NF }')
        gnuplot -e "datafile='$dat'; outfile='$out/busbw-$coll.png';" \
                -e "chart_title='$coll: bus bandwidth'; ncol=$ncol;" \
                -e "nseries=$((${#peer_list[@]} + 2)); term='$term'" \
                "$here/plot.gp" ||
            echo "compare.sh: gnuplot failed for $coll" >&2
    done
    echo
    echo "charts: $out/busbw-*.png"
    {
        echo
        for coll in "${coll_list[@]}"; do
            [[ -f $out/busbw-$coll.png ]] && echo "![$coll](busbw-$coll.png)"
        done
        true
    } >>"$out/summary.md"
}

if ((plot)); then
    if command -v gnuplot >/dev/null; then
        plot_charts
    else
        echo
        echo "gnuplot is not installed (Debian: apt-get install gnuplot-nox):" \
             "no charts."
    fi
fi

echo "results: $out (summary.md, summary.csv, per-run CSVs and logs)"
errors=$(awk -F'\t' '{ e += $7 } END { print e + 0 }' "$out/rows.tsv")
if ((errors > 0)); then
    echo "compare.sh: $errors wrong result(s) were found; see the logs" >&2
    exit 1
fi
