#!/usr/bin/env bash
# syscalls-l4.sh BINARY switchyard|haproxy [close|keep]: system calls per request of a
# layer-4 relay (switchyard `mode = "tcp"`, or HAProxy 2.6 `mode tcp`, one worker/thread)
# in front of two origin simulators, under wrk at 128 B: `close` is the L4 CPS shape (one
# request per connection, so per request = per connection), `keep` the L4 throughput shape
# (keep-alive). Counted by `strace -f -c` attached for a 3 s run after a 1 s warm-up.
# On-demand measurement, not part of the test suite. A debug build makes extra `fcntl`
# calls (tokio's and std's debug assertions: F_GETFL at registration, F_GETFD at close)
# that a release build does not.
# Environment: BASE_PORT=29600.
set -euo pipefail
BIN=$1; TGT=$2; SHAPE=${3:-close}; P=${BASE_PORT:-29600}
OUT=$(mktemp -d /tmp/sysc4.XXXX)
cat >"$OUT/s.toml" <<EOT
workers = 1
[[service]]
name = "bench"
listen = "127.0.0.1:$((P+11))"
mode = "tcp"
pool = "main"
[[pool]]
name = "main"
balance = "round-robin"
servers = [{ address = "127.0.0.1:$((P+1))", name = "a" }, { address = "127.0.0.1:$((P+2))", name = "b" }]
EOT
cat >"$OUT/h.cfg" <<EOT
global
    nbthread 1
    maxconn 9000
defaults
    mode tcp
    timeout connect 3s
    timeout client 60s
    timeout server 30s
frontend bench
    bind 127.0.0.1:$((P+11))
    default_backend main
backend main
    balance roundrobin
    server a 127.0.0.1:$((P+1))
    server b 127.0.0.1:$((P+2))
EOT
"$BIN" origin --listen 127.0.0.1:$((P+1)) >/dev/null 2>&1 & O1=$!
"$BIN" origin --listen 127.0.0.1:$((P+2)) >/dev/null 2>&1 & O2=$!
if [[ $TGT == haproxy ]]; then haproxy -db -f "$OUT/h.cfg" >"$OUT/h.log" 2>&1 & S=$!
else "$BIN" run -c "$OUT/s.toml" >"$OUT/sw.log" 2>&1 & S=$!; fi
trap 'kill $O1 $O2 $S 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$((P+11))/ && break; sleep 0.1; done
hdr=(); [[ $SHAPE == close ]] && hdr=(-H 'Connection: close')
wrk -t1 -c10 -d1s "${hdr[@]}" "http://127.0.0.1:$((P+11))/index.html?size=128" >/dev/null
strace -f -c -o "$OUT/strace" -p $S & T=$!
sleep 0.5
wrk -t1 -c10 -d3s "${hdr[@]}" "http://127.0.0.1:$((P+11))/index.html?size=128" >"$OUT/wrk"
kill -INT $T; wait $T || true
reqs=$(awk '/requests in/ {print $1}' "$OUT/wrk")
echo "requests: $reqs ($TGT $SHAPE)"
awk -v n="$reqs" 'NR>2 && $NF!="total" && $4 ~ /^[0-9]+$/ {printf "%-16s %6.2f\n", $NF, $4/n} $NF=="total" {printf "%-16s %6.2f\n", "TOTAL", $4/n}' "$OUT/strace" | sort -k2 -rn | head -20
