#!/usr/bin/env bash
# callgrind-l7.sh: user-space instructions per request of switchyard builds, compared.
#
# On-demand measurement, not part of the test suite. Wall-clock and even CPU-time figures
# drift on a shared machine; the number of instructions switchyard executes per request
# under callgrind does not (to within a few tenths of a percent), so it is the figure for a
# "no regression" check between two builds of the same code path. It counts user space
# only: the kernel's share (about 80 % of a small request on loopback) is outside it, and
# so are cache misses — it is a regression detector, not a throughput figure.
#
# For each binary: switchyard (one worker) under `valgrind --tool=callgrind` in front of
# the origin simulator, with `h2load --h1` sending N keep-alive requests of 128 B over one
# connection (the L7 keep-alive shape of PRODUCT.md section 3, `.png` rule included); then
# the same with 0 requests. (instructions(N) - instructions(0)) / N is the cost of one
# request, start-up and shutdown cancelled out.
#
# The same for HTTP/2: PROTO=h2c sends the requests as h2c streams (prior knowledge, STREAMS
# at a time on each connection), and POOL=h2 makes the pools speak h2c to the origin
# (`protocol = "h2"`) instead of HTTP/1.1. PROTO=h2 sends them as h2 streams over TLS (an
# `https` service with an ECDSA P-256 certificate made here, ALPN h2): the one handshake is
# counted in the N-request run only, so its cost (a few hundred instructions per request at
# N = 2000) is the same for every binary compared and cancels out of their difference.
# SIZE sets the response body (default 128 bytes). CACHE=1 gives the service a cache and
# asks the origin for a cacheable response (`cache=600`): every request after the first is
# a cache hit, so the figure is a hit's cost (the one miss is spread over N).
#
# A BINARY named `haproxy` runs HAProxy (the system's, `nbthread 1`) with the bench's L7
# setup instead (`mode http`, keep-alive both ways, `http-reuse always`, `option
# forwardfor`, an X-Forwarded-Proto header, the `.png` rule): the peer's instructions for
# the same requests, with PROTO=h1, POOL=h1, CACHE=0 only. Instruction counts of two
# programs compare less than those of two builds: how fast they run also depends on the
# memory they touch, which callgrind does not count.
#
# CONNS sets how many connections carry the requests at once (with STREAMS streams each for
# HTTP/2: 50 x 10 puts 500 requests in flight, where every stream's memory is cold when it is
# next touched). TOOL=cachegrind counts with valgrind's cache simulator instead (32 KiB L1s
# and a 512 KiB last level, one core's L2 here, unless LL says otherwise) and reports, per
# request, instructions, L1 instruction misses, L1 data read and write misses and
# last-level read and write misses: how much memory a request touches cold, which
# instruction counts do not see. HAProxy takes PROTO=h2c POOL=h2 too (`proto h2` on its
# servers).
#
# CGSIM=1 (with the default TOOL=callgrind) turns callgrind's cache simulator on, with the
# same caches as TOOL=cachegrind: its output then has the misses of every call, so the
# misses of a function everyone calls (memcpy) can be told apart by caller
# (`callgrind_annotate --inclusive=yes`, or the call lines of the output file).
#
# TOOL=dhat runs valgrind's heap profiler instead and reports the heap blocks and bytes
# allocated per request, then, per allocation site taking at least one block per two
# requests: the block size, the bytes read and written in those blocks per request (every
# access counted, so a line written twice counts twice), and the blocks live when the heap
# was at its largest (with CONNS x STREAMS requests in flight: one per request in flight
# for what a request keeps, none for what it frees within one poll). DHAT sees the
# C allocator only: build the binary with `cargo build --release --features system-alloc`
# (mimalloc, linked in, is invisible to it); its CPU figures are not switchyard's.
#
# Usage: scripts/callgrind-l7.sh BINARY [BINARY...]
# Environment: REQUESTS=2000, PER_CONN=0 (requests per connection; 0 = all on one),
#              CONNS=1 (connections at once; PER_CONN, when set, decides instead),
#              TOOL=callgrind (or cachegrind, or dhat), CGSIM=0 (or 1: callgrind with the caches),
#              LL=524288,8,64 (cachegrind's last level),
#              PROTO=h1 (or h2c, or h2 over TLS), STREAMS=10 (h2 streams at a time),
#              POOL=h1 (or h2), SIZE=128, CACHE=0 (or 1: cache hits),
#              BASE_PORT=29000, OUT (default bench-out/callgrind-l7-<timestamp>).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REQUESTS=${REQUESTS:-2000}
PER_CONN=${PER_CONN:-0}
PROTO=${PROTO:-h1}
STREAMS=${STREAMS:-10}
POOL=${POOL:-h1}
SIZE=${SIZE:-128}
CACHE=${CACHE:-0}
BASE_PORT=${BASE_PORT:-29000}
CONNS=${CONNS:-1}
TOOL=${TOOL:-callgrind}
case $TOOL in
callgrind | cachegrind | dhat) ;;
*) echo "TOOL: callgrind, cachegrind or dhat" >&2; exit 2 ;;
esac
LL=${LL:-524288,8,64}
OUT=${OUT:-$ROOT/bench-out/callgrind-l7-$(date +%Y%m%d-%H%M%S)}
[[ $# -ge 1 ]] || { echo "usage: $0 BINARY [BINARY...]" >&2; exit 2; }
for tool in valgrind h2load curl openssl; do
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
    local scheme=${2:-http} flags=()
    # A listener that speaks only h2c (HAProxy's `proto h2`) is probed in h2c.
    [[ ${3:-} == h2c ]] && flags=(--http2-prior-knowledge)
    for _ in $(seq 1 300); do
        curl -sk "${flags[@]}" -o /dev/null "$scheme://$1/" && return 0
        sleep 0.1
    done
    echo "nothing answers on $1" >&2
    return 1
}

service_cache=""
query="size=$SIZE"
if [[ $CACHE == 1 ]]; then
    service_cache="cache = true"
    query="$query&cache=600"
fi
pool_protocol=""
[[ $POOL == h2 ]] && pool_protocol='protocol = "h2"'
front_scheme=http
front_tls=""
if [[ $PROTO == h2 ]]; then
    front_scheme=https
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=localhost \
        -addext subjectAltName=DNS:localhost -keyout "$OUT/site.key" -out "$OUT/site.crt" 2>/dev/null
    front_tls="mode = \"https\"
tls = { certificate = \"$OUT/site.crt\", key = \"$OUT/site.key\" }"
fi
# shellcheck source=lib/l7-setup.sh
. "$ROOT/scripts/lib/l7-setup.sh"
l7_switchyard_toml "$LISTEN" "$ORIGIN" "$pool_protocol" "$front_tls
$service_cache" >"$OUT/switchyard.toml"

haproxy_bind="" haproxy_proto=""
[[ $PROTO == h2c ]] && haproxy_bind="proto h2"
[[ $POOL == h2 ]] && haproxy_proto="proto h2"
l7_haproxy_cfg "$LISTEN" "$ORIGIN" "$haproxy_bind" "$haproxy_proto" >"$OUT/haproxy.cfg"

# The origin simulator comes with switchyard: the first switchyard binary given.
origin_bin=""
for bin in "$@"; do
    if [[ $bin != haproxy ]]; then
        origin_bin=${origin_bin:-$bin}
    elif [[ $PROTO == h2 || $CACHE != 0 ]]; then
        echo "haproxy: only with PROTO=h1 or h2c and CACHE=0" >&2
        exit 2
    fi
done
[[ -n $origin_bin ]] || { echo "give a switchyard binary too (it runs the origin)" >&2; exit 2; }
"$origin_bin" origin --listen "$ORIGIN" >"$OUT/origin.log" 2>&1 &
pids+=($!)
wait_port "$ORIGIN"

# Instructions of one run of BINARY serving COUNT requests.
instructions() {
    local bin=$1 count=$2 tag=$3
    local cmd=("$bin" run -c "$OUT/switchyard.toml")
    [[ $bin == haproxy ]] && cmd=(haproxy -f "$OUT/haproxy.cfg" -db)
    local tool=(--tool=callgrind ${CGSIM:+--cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL=$LL} --callgrind-out-file="$OUT/$tag.$count.out")
    [[ $TOOL == cachegrind ]] &&
        tool=(--tool=cachegrind --cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL="$LL"
            --cachegrind-out-file="$OUT/$tag.$count.out")
    [[ $TOOL == dhat ]] && tool=(--tool=dhat --dhat-out-file="$OUT/$tag.$count.out")
    valgrind "${tool[@]}" \
        "${cmd[@]}" >"$OUT/$tag.$count.log" 2>&1 &
    local pid=$!
    wait_port "$LISTEN" "$front_scheme" "$PROTO"
    if [[ $count -gt 0 ]]; then
        local conns=$CONNS
        [[ $PER_CONN -gt 0 ]] && conns=$((count / PER_CONN))
        local shape=(--h1 -m 1)
        [[ $PROTO == h2c || $PROTO == h2 ]] && shape=(-m "$STREAMS")
        h2load "${shape[@]}" -n "$count" -c "$conns" "$front_scheme://$LISTEN/index.html?$query" \
            >"$OUT/$tag.$count.h2load" 2>&1
        # A run whose requests did not all succeed (seen now and then at 128 KB under
        # valgrind: h2load loses the connection part-way) would be divided by the wrong count.
        if ! grep -q "^requests: $count total, $count started, $count done, $count succeeded" \
            "$OUT/$tag.$count.h2load"; then
            echo "h2load: not every request succeeded, see $OUT/$tag.$count.h2load" >&2
            kill -TERM "$pid"
            wait "$pid" || true
            return 1
        fi
    fi
    kill -TERM "$pid"
    wait "$pid" || true
    # The probe of wait_port is one request too, in both runs: it cancels out.
    # callgrind's summary is instructions; cachegrind's, with the cache simulator, is
    # Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw (the reads and writes themselves left out).
    if [[ $TOOL == dhat ]]; then
        # "Total: 79,447,767 bytes in 112,140 blocks": blocks, then bytes.
        sed -n 's/.*Total: *\([0-9,]*\) bytes in \([0-9,]*\) blocks.*/\2 \1/p' "$OUT/$tag.$count.log" | tr -d ,
        return
    fi
    local events
    events=$(sed -n 's/^summary: //p' "$OUT/$tag.$count.out" | tail -1)
    if [[ $TOOL == cachegrind ]]; then
        read -r ir i1 _ _ d1r dlr _ d1w dlw <<<"$events"
        echo "$ir $i1 $d1r $d1w $dlr $dlw"
    else
        echo "${events%% *}"
    fi
}

# The allocation sites of a DHAT profile with at least one block per two requests: blocks
# and bytes per request, the block size, bytes read and written per request (every access
# counted), the blocks live when the heap was at its largest, and the first frames of
# switchyard's code.
sites() {
    python3 - "$1" "$REQUESTS" <<'PY'
import json
import sys

profile, requests = json.load(open(sys.argv[1])), int(sys.argv[2])
frames = profile["ftbl"]
rows = []
for pp in profile["pps"]:
    if pp["tbk"] * 2 < requests:
        continue
    ours = [frames[i].split(": ", 1)[-1] for i in pp["fs"]]
    ours = [f for f in ours if "/rustc/" not in f and "library/" not in f and "malloc" not in f]
    rows.append((pp["tbk"] / requests, pp["tb"] / requests, pp["tb"] // pp["tbk"], pp.get("rb", 0) / requests,
                 pp.get("wb", 0) / requests, pp["gbk"], " <- ".join(ours[:2])[:200]))
print("  blocks/req  bytes/req  block  read/req  written/req  live at peak  site")
for r in sorted(rows, key=lambda r: -r[1]):
    print(f"  {r[0]:10.2f} {r[1]:10.0f} {r[2]:6d} {r[3]:9.0f} {r[4]:12.0f} {r[5]:13d}  {r[6]}")
PY
}

if [[ $TOOL == dhat ]]; then
    printf '| binary | heap blocks per request | heap bytes per request |\n|---|---:|---:|\n' | tee "$OUT/summary.md"
elif [[ $TOOL == cachegrind ]]; then
    printf '| binary | instructions | L1i misses | L1d read misses | L1d write misses | LL read misses | LL write misses |\n|---|---:|---:|---:|---:|---:|---:|\n' |
        tee "$OUT/summary.md"
else
    printf '| binary | instructions per request |\n|---|---:|\n' | tee "$OUT/summary.md"
fi
i=0
for bin in "$@"; do
    i=$((i + 1))
    tag=bin$i
    read -ra full <<<"$(instructions "$bin" "$REQUESTS" "$tag")"
    read -ra none <<<"$(instructions "$bin" 0 "$tag")"
    row="| $bin |"
    for k in "${!full[@]}"; do
        row="$row $(( (full[k] - none[k]) / REQUESTS )) |"
    done
    echo "$row" | tee -a "$OUT/summary.md"
    if [[ $TOOL == dhat ]]; then
        if [[ $(( (full[0] - none[0]) / REQUESTS )) -eq 0 ]]; then
            echo "  $bin: no heap block per request seen: DHAT sees malloc only, build with" \
                "\`cargo build --release --features system-alloc\`" | tee -a "$OUT/summary.md"
        else
            sites "$OUT/$tag.$REQUESTS.out" | tee -a "$OUT/summary.md"
        fi
    fi
done
