#!/usr/bin/env bash
# Range hits from a stored 1 MB object: requests/s and the proxy's CPU per request.
#
# switchyard (one worker, pinned to core $PROXY_CPU) caches GET /range?size=1048576&cache=3600
# from the origin simulator; wrk (pinned to core $LOAD_CPU with the origin) then asks for byte
# ranges of it over keep-alive connections. Each case runs $RUNS times; every run checks that
# the origin saw no request (all hits). CPU per request is the proxy's user+system time over
# the run (from /proc) divided by the requests wrk completed.
#
# Usage: scripts/cache-ranges.sh [path/to/switchyard]   (default target/release/switchyard)
# Needs wrk and taskset. Loopback only; every process it starts is stopped on exit.
set -euo pipefail

BIN=${1:-target/release/switchyard}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
RUNS=${RUNS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-32}
ORIGIN=127.0.0.1:19811
PROXY=127.0.0.1:19812
DIR=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$DIR"
}
trap cleanup EXIT

cat > "$DIR/switchyard.toml" <<EOF
workers = 1
[[service]]
name = "web"
listen = "$PROXY"
pool = "main"
cache = { size = "64MiB" }
[[pool]]
name = "main"
servers = [{ address = "$ORIGIN" }]
EOF

taskset -c "$LOAD_CPU" "$BIN" origin --listen "$ORIGIN" --log warn > "$DIR/origin.log" 2>&1 &
PIDS+=($!)
taskset -c "$PROXY_CPU" "$BIN" run --config "$DIR/switchyard.toml" --log warn > "$DIR/proxy.log" 2>&1 &
PROXY_PID=$!
PIDS+=($PROXY_PID)
for _ in $(seq 50); do curl -s -o /dev/null "http://$PROXY/" && break; sleep 0.1; done

URL="http://$PROXY/range?size=1048576&cache=3600"
curl -s -o /dev/null "$URL"
curl -s -o /dev/null "$URL"

origin_requests() { curl -s "http://$ORIGIN/__origin/stats" | sed 's/.*"requests":\([0-9]*\).*/\1/'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$PROXY_PID/stat"; }

run_case() {
    local name=$1 range=$2
    for i in $(seq "$RUNS"); do
        local before_origin before_cpu out requests rps after_cpu us
        before_origin=$(origin_requests)
        before_cpu=$(cpu_ticks)
        if [ -n "$range" ]; then
            out=$(taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" -H "Range: $range" "$URL")
        else
            out=$(taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" "$URL")
        fi
        after_cpu=$(cpu_ticks)
        requests=$(echo "$out" | awk '/requests in/ {print $1}')
        rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
        us=$(awk -v t=$((after_cpu - before_cpu)) -v n="$requests" 'BEGIN { printf "%.1f", t * 1e6 / 100 / n }')
        local non2xx
        non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
        echo "$name run=$i requests=$requests rps=$rps proxy_us_per_request=$us origin_requests_during_run=$(( $(origin_requests) - before_origin )) non_2xx=${non2xx:-0}"
    done
}

run_case "full-1MB" ""
run_case "range-first-64KiB" "bytes=0-65535"
run_case "range-suffix-1KiB" "bytes=-1024"
run_case "ranges-two-64KiB-multipart" "bytes=0-65535,524288-589823"
