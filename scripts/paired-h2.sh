#!/usr/bin/env bash
# paired-h2.sh: CPU per HTTP/2 request of several proxies, measured in short bursts that
# alternate between them, so that the machine's drift hits each the same.
#
# On-demand measurement, not part of the test suite. On the project's shared 2-core
# machine the level of a whole run moves by a third from one minute to the next, so two
# builds measured one after the other cannot be told apart by less than that. Here every
# target runs at once (each on its own port, all pinned to core 0; an idle proxy costs
# nothing), and the load goes to one at a time for one short burst of N requests: h2load
# on core 1 (with the origin simulator), h2c with prior knowledge, C connections x M
# streams. Each burst's CPU (utime + stime of the target's process from /proc, clock ticks
# of 10 ms) divided by its requests is one figure; a round is one burst per target. The
# summary gives each target's median and, per round, the first target's figure divided by
# this one's (its efficiency against the first; >1: this one spends less), as a median
# over the rounds with its range: adjacent bursts share the machine's state, so the ratio
# drifts far less than either figure. It also gives each target's user and kernel time per
# request apart (the same ticks, split; with ticks of 10 ms a burst's split is coarse, the
# medians less so) and its share of a core during the bursts (CPU time over the burst's wall
# time: below 1 the target waited for work, and how many events each wake-up found weighs on
# its cost; report docs/reports/2026-11-28-window-updates).
#
# POOL=h2 (default) has the proxies speak h2c to the origin (`protocol = "h2"`, HAProxy
# `proto h2`), POOL=h1 HTTP/1.1 keep-alive. The setup is the bench's L7 one: a `.png` rule
# to a second pool, X-Forwarded-Proto set, keep-alive and reuse both ways.
#
# SEGMENTS=1 also counts TCP segments per request in each burst: every segment the machine
# sent (`/proc/net/snmp` OutSegs: the burst's traffic on the loopback, both ways and both
# sides of the proxy) and, from `ss -ti` of the target's connections to the origin, the
# segments it sent there (data and pure ACKs apart) and received from it (with their mean
# size). Each segment costs kernel time on both sides of the loopback; a proxy whose traffic
# takes more of them spends more kernel time per request (report
# docs/reports/2026-11-28-working-set, section 6). The machine's count includes whatever
# else runs on it. The origin columns sum over the connections open before and after each
# burst: they hold only while the target keeps its connections to the origin open (with
# `max_idle_per_server` at 256, 500 streams to one HTTP/1.1 origin made switchyard close
# and reopen some, and the columns went negative).
#
# Usage: scripts/paired-h2.sh ROUNDS TARGET... (a switchyard binary, or `haproxy`)
# Environment: N=60000 (requests per burst), C=50, M=10, SIZE=128, POOL=h2, SEGMENTS=0,
#              ORIGIN_BIN (default: the first switchyard target), BASE_PORT=30100.
# Example: scripts/paired-h2.sh 25 haproxy target/release/switchyard /tmp/switchyard-before
set -euo pipefail

[[ $# -ge 2 ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
ROUNDS=$1
shift
P=${BASE_PORT:-30100}
N=${N:-60000}
POOL=${POOL:-h2}
SIZE=${SIZE:-128}
C=${C:-50}
M=${M:-10}
SEGMENTS=${SEGMENTS:-0}
for tool in h2load curl taskset; do
    command -v "$tool" >/dev/null || { echo "paired-h2.sh: needs $tool" >&2; exit 2; }
done
ORIGIN_BIN=${ORIGIN_BIN:-}
if [[ -z $ORIGIN_BIN ]]; then
    for t in "$@"; do [[ $t != haproxy ]] && { ORIGIN_BIN=$t; break; }; done
fi
[[ -n $ORIGIN_BIN ]] || { echo "paired-h2.sh: give a switchyard binary (it runs the origin) or ORIGIN_BIN" >&2; exit 2; }

# shellcheck source=lib/l7-setup.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/l7-setup.sh"

OUT=$(mktemp -d /tmp/paired-h2.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$OUT"
}
trap cleanup EXIT

server_proto=""
hap_proto=""
if [[ $POOL == h2 ]]; then
    server_proto='protocol = "h2"'
    hap_proto="proto h2"
fi
ORIGIN=127.0.0.1:$((P + 1))
taskset -c 1 "$ORIGIN_BIN" origin --listen "$ORIGIN" >"$OUT/origin.log" 2>&1 &
pids+=($!)

ports=()
procs=()
names=()
i=0
for target in "$@"; do
    i=$((i + 1))
    port=$((P + 10 + i))
    if [[ $target == haproxy ]]; then
        l7_haproxy_cfg "127.0.0.1:$port" "$ORIGIN" "proto h2" "$hap_proto" >"$OUT/haproxy$i.cfg"
        taskset -c 0 haproxy -f "$OUT/haproxy$i.cfg" -db >"$OUT/target$i.log" 2>&1 &
    else
        l7_switchyard_toml "127.0.0.1:$port" "$ORIGIN" "$server_proto" >"$OUT/switchyard$i.toml"
        taskset -c 0 "$target" run -c "$OUT/switchyard$i.toml" >"$OUT/target$i.log" 2>&1 &
    fi
    pids+=($!)
    procs+=($!)
    ports+=("$port")
    names+=("$i:$(basename "$target")")
done

url() { echo "http://127.0.0.1:$1/index.html?size=$SIZE"; }
for k in "${!ports[@]}"; do
    up=0
    for _ in $(seq 100); do
        curl -s --http2-prior-knowledge -o /dev/null "http://127.0.0.1:${ports[$k]}/" && { up=1; break; }
        sleep 0.1
    done
    [[ $up == 1 ]] || { echo "paired-h2.sh: ${names[$k]} did not come up" >&2; cat "$OUT/target$((k + 1)).log" >&2; exit 1; }
    # Warm-up: connections to the origin opened, memory touched once.
    taskset -c 1 h2load -n 20000 -c "$C" -m "$M" "$(url "${ports[$k]}")" >/dev/null
done

# The target's user and kernel clock ticks so far, then the wall clock in ns.
cpu() { echo "$(awk '{print $14, $15}' "/proc/$1/stat") $(date +%s%N)"; }
# Segments: the machine's OutSegs, then over PID's connections to the origin the sums of
# segs_out, data_segs_out, segs_in, data_segs_in and bytes_received.
segments() {
    [[ $SEGMENTS == 1 ]] || { echo "0 0 0 0 0 0"; return; }
    local all
    all=$(awk '/^Tcp: [0-9]/ {print $12}' /proc/net/snmp)
    ss -tinpH state established "( dport = :${ORIGIN##*:} )" | awk -v pid="pid=$1," -v all="$all" '
        /users:/ { mine = index($0, pid) > 0; next }
        mine {
            for (i = 1; i <= NF; i++) {
                split($i, kv, ":")
                if (kv[1] in sum) sum[kv[1]] += kv[2]
            }
        }
        BEGIN { split("segs_out data_segs_out segs_in data_segs_in bytes_received", keys); for (k in keys) sum[keys[k]] = 0 }
        END { print all, sum["segs_out"], sum["data_segs_out"], sum["segs_in"], sum["data_segs_in"], sum["bytes_received"] }'
}
hz=$(getconf CLK_TCK)
for round in $(seq "$ROUNDS"); do
    for k in "${!ports[@]}"; do
        read -r -a s0 <<<"$(segments "${procs[$k]}")"
        read -r u0 k0 t0 <<<"$(cpu "${procs[$k]}")"
        done_requests=$(taskset -c 1 h2load -n "$N" -c "$C" -m "$M" "$(url "${ports[$k]}")" |
            awk '/^requests:/ {print $8}')
        read -r u1 k1 t1 <<<"$(cpu "${procs[$k]}")"
        read -r -a s1 <<<"$(segments "${procs[$k]}")"
        [[ ${done_requests:-0} -gt 0 ]] || { echo "paired-h2.sh: no request completed on ${names[$k]}" >&2; exit 1; }
        d=()
        for j in 0 1 2 3 4 5; do d+=($((s1[j] - s0[j]))); done
        awk -v r="$round" -v k="$k" -v u=$((u1 - u0)) -v s=$((k1 - k0)) -v w=$((t1 - t0)) -v n="$done_requests" \
            -v hz="$hz" -v d="${d[*]}" \
            'BEGIN { split(d, x, " "); printf "%d %d %.4f %.4f %.4f %.4f %.4f %.1f %.4f %.4f %.3f\n", r, k,
                     (u + s) / hz * 1e6 / n, x[1] / n, x[3] / n, (x[2] - x[3]) / n, x[5] / n,
                     (x[5] > 0 ? x[6] / x[5] : 0), u / hz * 1e6 / n, s / hz * 1e6 / n, (u + s) / hz / (w / 1e9) }'
    done
done >"$OUT/bursts"

python3 - "$OUT/bursts" "${names[@]}" <<'EOF'
import collections
import statistics
import sys

bursts = collections.defaultdict(dict)
segments = collections.defaultdict(list)
split = collections.defaultdict(list)
for line in open(sys.argv[1]):
    r, k, us, *rest = line.split()
    bursts[int(k)][int(r)] = float(us)
    segments[int(k)].append([float(x) for x in rest[:5]])
    split[int(k)].append([float(x) for x in rest[5:]])
names = sys.argv[2:]
print(f"{'target':32s} {'median µs/req':>13s} {'min':>7s} {'max':>7s}   first/this per round: median (min-max)")
for k in sorted(bursts):
    values = list(bursts[k].values())
    ratios = [bursts[0][r] / bursts[k][r] for r in bursts[k] if bursts[k][r] > 0]
    print(f"{names[k]:32s} {statistics.median(values):13.2f} {min(values):7.2f} {max(values):7.2f}"
          f"   {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
print()
print(f"{'user / kernel (medians)':32s} {'user µs/req':>11s} {'kernel µs/req':>13s} {'share of a core':>16s}")
for k in sorted(split):
    cols = [statistics.median(s[i] for s in split[k]) for i in range(3)]
    print(f"{names[k]:32s} {cols[0]:11.2f} {cols[1]:13.2f} {cols[2]:16.2f}")
if any(row[0] > 0 for k in segments for row in segments[k]):
    print()
    print(f"{'segments per request (medians)':32s} {'machine':>8s} {'to origin: data':>16s} {'pure ACKs':>10s}"
          f" {'from origin':>12s} {'bytes each':>11s}")
    for k in sorted(segments):
        cols = [statistics.median(s[i] for s in segments[k]) for i in range(5)]
        print(f"{names[k]:32s} {cols[0]:8.3f} {cols[1]:16.3f} {cols[2]:10.3f} {cols[3]:12.3f} {cols[4]:11.0f}")
EOF
