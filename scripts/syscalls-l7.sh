#!/usr/bin/env bash
# syscalls-l7.sh BINARY [close|keep]: system calls per request of switchyard (one worker)
# as an HTTP/1.1 layer-7 proxy (the `.png` rule of the L7 tests, two pools on one origin
# simulator), under wrk at 128 B: `close` sends `Connection: close` (one request per
# connection, so per request = per connection), `keep` keeps connections alive. Counted by
# `strace -f -c` attached for a 3 s run after a 1 s warm-up. On-demand measurement, not
# part of the test suite; compare release builds (a debug build makes extra `fcntl` calls).
# Environment: BASE_PORT=29500.
set -euo pipefail
BIN=$1; SHAPE=${2:-close}; P=${BASE_PORT:-29500}
OUT=$(mktemp -d /tmp/sysc.XXXX)
cat >"$OUT/s.toml" <<EOT
workers = 1
[[service]]
name = "web"
listen = ["127.0.0.1:$((P+11))"]
pool = "main"
rules = [{ path_suffix = ".png", pool = "images" }]
[[pool]]
name = "main"
servers = [{ address = "127.0.0.1:$((P+1))" }]
[[pool]]
name = "images"
servers = [{ address = "127.0.0.1:$((P+1))" }]
EOT
"$BIN" origin --listen 127.0.0.1:$((P+1)) >/dev/null 2>&1 & O=$!
"$BIN" run -c "$OUT/s.toml" >"$OUT/sw.log" 2>&1 & S=$!
trap 'kill $O $S 2>/dev/null || true; rm -rf "$OUT"' EXIT
for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$((P+11))/ && break; sleep 0.1; done
hdr=(); [[ $SHAPE == close ]] && hdr=(-H 'Connection: close')
wrk -t1 -c10 -d1s "${hdr[@]}" "http://127.0.0.1:$((P+11))/index.html?size=128" >/dev/null
strace -f -c -o "$OUT/strace" -p $S & T=$!
sleep 0.5
wrk -t1 -c10 -d3s "${hdr[@]}" "http://127.0.0.1:$((P+11))/index.html?size=128" >"$OUT/wrk"
kill -INT $T; wait $T || true
reqs=$(awk '/requests in/ {print $1}' "$OUT/wrk")
echo "requests: $reqs ($SHAPE)"
awk -v n="$reqs" 'NR>2 && $NF!="total" && $4 ~ /^[0-9]+$/ {printf "%-16s %6.2f\n", $NF, $4/n} $NF=="total" {printf "%-16s %6.2f\n", "TOTAL", $4/n}' "$OUT/strace" | sort -k2 -rn | head -20
