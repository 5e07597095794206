#!/usr/bin/env bash
# idle-memory.sh: memory per idle connection of switchyard builds (and HAProxy), at
# layer 7 (HTTP/1.1 keep-alive) and layer 4 (`tcp` service), measured the way the bench's
# concurrency test does: the proxy's resident memory growth while it holds N connections,
# each answered once, divided by N.
#
# On-demand measurement, not part of the test suite. The bench's test covers layer 7 only
# and runs a whole setup; this one is quick, takes any binaries, and adds layer 4 (where
# each client connection also holds a server connection).
#
# The origin is NGINX (keep-alive, so layer-4 relays stay open); every process is
# started here and stopped by its PID. mimalloc's transparent huge pages are off
# (MIMALLOC_ALLOW_THP=0) unless THP=1: with them resident memory grows in 2 MiB steps and
# the figure is quantized (ADR 0008).
#
# Usage: scripts/idle-memory.sh BINARY [BINARY...]
# Environment: N=8000 (connections), THP=0, PEER=haproxy (or "" for none),
#              BASE_PORT=18080, OUT (default bench-out/idle-memory-<timestamp>).
set -euo pipefail

N=${N:-8000}
THP=${THP:-0}
PEER=${PEER-haproxy}
BASE_PORT=${BASE_PORT:-18080}
OUT=${OUT:-bench-out/idle-memory-$(date +%Y%m%d-%H%M%S)}
[ $# -ge 1 ] || { echo "usage: $0 BINARY [BINARY...]" >&2; exit 2; }
mkdir -p "$OUT/www"
OUT=$(cd "$OUT" && pwd)
L7=$BASE_PORT
ORIGIN=$((BASE_PORT + 1))
L4=$((BASE_PORT + 10))
head -c 128 /dev/zero | tr '\0' a > "$OUT/www/index.html"

PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

cat > "$OUT/nginx.conf" <<EOF
worker_processes 1;
daemon off;
error_log $OUT/nginx-error.log;
pid $OUT/nginx.pid;
events { worker_connections 20000; }
worker_rlimit_nofile 20000;
http {
  access_log off;
  keepalive_timeout 300s;
  keepalive_requests 100000;
  server { listen 127.0.0.1:$ORIGIN; root $OUT/www; }
}
EOF
nginx -c "$OUT/nginx.conf" &
PIDS+=($!)

for mode in l7 l4; do
    port=$L7
    extra='timeouts = { client_idle = "300s" }'
    if [ $mode = l4 ]; then port=$L4; extra='mode = "tcp"'; fi
    cat > "$OUT/switchyard-$mode.toml" <<EOF
workers = 1
[[service]]
name = "idle"
$extra
listen = ["127.0.0.1:$port"]
pool = "origin"
[[pool]]
name = "origin"
servers = [{ address = "127.0.0.1:$ORIGIN" }]
EOF
done
cat > "$OUT/haproxy.cfg" <<EOF
global
  maxconn 9500
  nbthread 1
defaults
  timeout connect 5s
  timeout client 300s
  timeout server 300s
  timeout http-keep-alive 300s
frontend l7
  mode http
  bind 127.0.0.1:$L7
  default_backend origin
frontend l4
  mode tcp
  bind 127.0.0.1:$L4
  default_backend origin4
backend origin
  mode http
  server s1 127.0.0.1:$ORIGIN
backend origin4
  mode tcp
  server s1 127.0.0.1:$ORIGIN
EOF

# Opens $1 connections to port $2, each answered once, and holds them until killed.
cat > "$OUT/hold.py" <<'EOF'
import socket, sys, time
n, port = int(sys.argv[1]), int(sys.argv[2])
conns = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /index.html HTTP/1.1\r\nhost: idle\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(4096)
    head, _, body = buf.partition(b"\r\n\r\n")
    lengths = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")]
    while lengths and len(body) < lengths[0]:
        body += s.recv(4096)
    conns.append(s)
print("held", len(conns), flush=True)
time.sleep(60)
EOF

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# measure NAME PORT COMMAND...: bytes per idle connection of the process COMMAND starts.
measure() {
    local name=$1 port=$2
    shift 2
    "$@" > "$OUT/$name.log" 2>&1 &
    local pid=$!
    PIDS+=($pid)
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), timeout=1)" 2>/dev/null && break
        sleep 0.1
    done
    python3 "$OUT/hold.py" 1 "$port" > /dev/null & local warm=$!
    sleep 0.5
    kill $warm 2>/dev/null || true
    sleep 0.3
    if ! kill -0 $pid 2>/dev/null; then
        echo "$name: the proxy exited:" >&2
        cat "$OUT/$name.log" >&2
        exit 1
    fi
    local r0; r0=$(rss_kib $pid)
    python3 "$OUT/hold.py" "$N" "$port" > "$OUT/hold.out" &
    local hold=$!
    for _ in $(seq 600); do grep -q held "$OUT/hold.out" 2>/dev/null && break; sleep 0.2; done
    sleep 0.5
    local r1; r1=$(rss_kib $pid)
    kill $hold 2>/dev/null || true
    kill $pid 2>/dev/null || true
    wait $pid 2>/dev/null || true
    printf '%-40s %6d B per idle connection (RSS %d -> %d KiB, N=%d)\n' "$name" $(((r1 - r0) * 1024 / N)) "$r0" "$r1" "$N" | tee -a "$OUT/results.txt"
}

for bin in "$@"; do
    label=$(basename "$bin")
    measure "$label L7" $L7 env MIMALLOC_ALLOW_THP=$THP taskset -c 0 "$bin" run --config "$OUT/switchyard-l7.toml"
    measure "$label L4" $L4 env MIMALLOC_ALLOW_THP=$THP taskset -c 0 "$bin" run --config "$OUT/switchyard-l4.toml"
done
if [ -n "$PEER" ]; then
    measure "haproxy L7" $L7 taskset -c 0 haproxy -f "$OUT/haproxy.cfg"
    measure "haproxy L4" $L4 taskset -c 0 haproxy -f "$OUT/haproxy.cfg"
fi
echo "results: $OUT/results.txt"
