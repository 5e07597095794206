#!/usr/bin/env bash
# callgrind-l4.sh: user-space instructions per connection of switchyard builds relaying at
# layer 4 (`mode = "tcp"`), compared (see callgrind-l7.sh for why instructions).
#
# For each binary: switchyard (one worker) under `valgrind --tool=callgrind` in front of
# the origin simulator, with `h2load --h1` opening CONNS connections of PER_CONN requests
# of 128 B each (PER_CONN=1: the L4 CPS shape; 100: the L4 throughput shape); then the same
# with no connection. (instructions(CONNS) - instructions(0)) / CONNS is the cost of one
# connection, start-up and shutdown cancelled out.
#
# A BINARY named `haproxy` runs HAProxy (the system's, `nbthread 1`, `mode tcp`, the
# bench's L4 setup) instead: the peer's instructions for the same connections (see
# callgrind-l7.sh on what comparing two programs' counts means).
#
# Usage: scripts/callgrind-l4.sh BINARY [BINARY...]
# Environment: CONNS=500, PER_CONN=1, BASE_PORT=29000,
#              OUT (default bench-out/callgrind-l4-<timestamp>).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CONNS=${CONNS:-500}
PER_CONN=${PER_CONN:-1}
BASE_PORT=${BASE_PORT:-29000}
OUT=${OUT:-$ROOT/bench-out/callgrind-l4-$(date +%Y%m%d-%H%M%S)}
[[ $# -ge 1 ]] || { echo "usage: $0 BINARY [BINARY...]" >&2; exit 2; }
for tool in valgrind h2load curl; do
    command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 2; }
done
mkdir -p "$OUT"

ORIGIN="127.0.0.1:$((BASE_PORT + 1))"
LISTEN="127.0.0.1:$((BASE_PORT + 11))"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

wait_port() {
    for _ in $(seq 1 300); do
        curl -s -o /dev/null "http://$1/" && return 0
        sleep 0.1
    done
    echo "nothing answers on $1" >&2
    return 1
}

cat >"$OUT/switchyard.toml" <<EOF
workers = 1

[[service]]
name = "l4"
listen = ["$LISTEN"]
mode = "tcp"
pool = "main"

[[pool]]
name = "main"
servers = [{ address = "$ORIGIN" }]
EOF

cat >"$OUT/haproxy.cfg" <<EOF
global
    nbthread 1
    maxconn 9000
defaults
    mode tcp
    timeout connect 3s
    timeout client 60s
    timeout server 30s
frontend l4
    bind $LISTEN
    default_backend main
backend main
    server a $ORIGIN
EOF

# The origin simulator comes with switchyard: the first switchyard binary given.
origin_bin=""
for bin in "$@"; do
    [[ $bin == haproxy ]] || origin_bin=${origin_bin:-$bin}
done
[[ -n $origin_bin ]] || { echo "give a switchyard binary too (it runs the origin)" >&2; exit 2; }
"$origin_bin" origin --listen "$ORIGIN" >"$OUT/origin.log" 2>&1 &
pids+=($!)
wait_port "$ORIGIN"

# Instructions of one run of BINARY serving COUNT connections.
instructions() {
    local bin=$1 count=$2 tag=$3
    local cmd=("$bin" run -c "$OUT/switchyard.toml")
    [[ $bin == haproxy ]] && cmd=(haproxy -f "$OUT/haproxy.cfg" -db)
    valgrind --tool=callgrind --callgrind-out-file="$OUT/$tag.$count.out" \
        "${cmd[@]}" >"$OUT/$tag.$count.log" 2>&1 &
    local pid=$!
    wait_port "$LISTEN"
    if [[ $count -gt 0 ]]; then
        h2load --h1 -m 1 -n $((count * PER_CONN)) -c "$count" \
            "http://$LISTEN/index.html?size=128" >"$OUT/$tag.$count.h2load" 2>&1
    fi
    kill -TERM "$pid"
    wait "$pid" || true
    # The probe of wait_port is one connection too, in both runs: it cancels out.
    sed -n 's/^summary: \([0-9]*\).*/\1/p' "$OUT/$tag.$count.out" | tail -1
}

printf '| binary | instructions per connection (%s requests each) |\n|---|---:|\n' "$PER_CONN" \
    | tee "$OUT/summary.md"
i=0
for bin in "$@"; do
    i=$((i + 1))
    tag=bin$i
    full=$(instructions "$bin" "$CONNS" "$tag")
    none=$(instructions "$bin" 0 "$tag")
    per=$(( (full - none) / CONNS ))
    printf '| %s | %s |\n' "$bin" "$per" | tee -a "$OUT/summary.md"
done
