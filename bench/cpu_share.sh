# cpu_share.sh: sourced by bench/pin_servers.sh and tests/cluster/cluster.sh,
# which give each (virtual or emulated) server its own CPUs the same way.

# cpu_share I NSERVERS: the CPUs of server I as a taskset list, or "" when
# there are more servers than CPUs (then nobody is pinned: two servers on
# one CPU would each run only when the other sleeps, a scheduler tick per
# wait). The CPUs are those this process may use (read from /proc, since
# taskset's own message is translated in some locales), split into even
# shares in order.
cpu_share() {
    local i=$1 n=$2 per extra first count part c
    local -a cpus=() parts
    IFS=, read -r -a parts <<<"$(awk '/^Cpus_allowed_list:/ { print $2 }' \
                                     /proc/self/status)"
    for part in "${parts[@]}"; do
        for ((c = ${part%-*}; c <= ${part#*-}; c++)); do cpus+=("$c"); done
    done
    ((${#cpus[@]} >= n)) || { echo ""; return; }
    per=$((${#cpus[@]} / n)) extra=$((${#cpus[@]} % n))
    first=$((i * per + (i < extra ? i : extra)))
    count=$((per + (i < extra ? 1 : 0)))
    local IFS=,
    echo "${cpus[*]:first:count}"
}
