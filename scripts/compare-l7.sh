#!/usr/bin/env bash
# compare-l7.sh: proxy CPU time per request, switchyard beside HAProxy (and NGINX), same run.
#
# On-demand measurement, not part of the test suite. The figure that counts on a shared
# 2-core machine is CPU time of the proxy per request (utime+stime from /proc, sampled
# before and after a wrk run), compared with the peers measured in the same run
# (docs: PRODUCT.md section 3, "L7 keep-alive, 128 B, .png rule").
#
# Layout: proxy under test on core 0; the three origins and wrk share core 1.
# Each proxy uses one worker (switchyard workers = 1, HAProxy nbthread 1, NGINX
# worker_processes 1) and the same function: pool "main" (2 servers, round robin),
# pool "images" (1 server) for paths ending in ".png", X-Forwarded-For and
# X-Forwarded-Proto towards servers, keep-alive to clients and to servers.
#
# Environment (all optional):
#   MODE=keepalive|close   keepalive (default): wrk keeps connections open (L7 RPS).
#                          close: "Connection: close", 1 request per connection (L7 CPS).
#   DURATION=10            seconds of each measured wrk run
#   WARMUP=2               seconds of wrk before each measured run
#   REPEATS=3              measured runs per proxy, interleaved sw, haproxy, nginx, sw, ...
#   CONNS=50               wrk connections
#   THREADS=1              wrk threads
#   PNG_EVERY=10           1 request in PNG_EVERY is /img/logo.png, the rest /index.html
#                          (0: every request is plain "/")
#   BASE_PORT=28000        origins on BASE_PORT+1..3, proxies on BASE_PORT+11..13
#   PROXIES="switchyard haproxy nginx"   subset/order to measure (nginx skipped if absent)
#   HAPROXY_REUSE=always   value of HAProxy's http-reuse (always|safe|aggressive|never)
#   PROXY_CPU=0 LOAD_CPU=1 cores for the proxy, and for wrk + origins
#   SWITCHYARD_BIN         use this binary instead of `cargo build --release -p switchyard`
#   OUT                    output dir (default bench-out/compare-l7-<mode>-<timestamp>)
#
# Output: OUT/summary.md (also printed), OUT/results.json, OUT/runs.tsv, generated configs,
# proxy logs, every wrk output. Exit status 1 when a proxy fails its function check or a
# process dies; measured runs with errors are kept but flagged.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE="$ROOT/scripts"

MODE=${MODE:-keepalive}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
REPEATS=${REPEATS:-3}
CONNS=${CONNS:-50}
THREADS=${THREADS:-1}
PNG_EVERY=${PNG_EVERY:-10}
BASE_PORT=${BASE_PORT:-28000}
PROXIES=${PROXIES:-switchyard haproxy nginx}
HAPROXY_REUSE=${HAPROXY_REUSE:-always}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=${OUT:-$ROOT/bench-out/compare-l7-$MODE-$STAMP}

case $MODE in keepalive | close) ;; *) echo "MODE must be keepalive or close" >&2; exit 2 ;; esac
for v in DURATION WARMUP REPEATS CONNS THREADS PNG_EVERY BASE_PORT PROXY_CPU LOAD_CPU; do
    [[ ${!v} =~ ^[0-9]+$ ]] || { echo "$v must be a non-negative integer" >&2; exit 2; }
done
for tool in wrk taskset curl jq python3 haproxy; do
    command -v "$tool" >/dev/null || { echo "missing tool: $tool" >&2; exit 2; }
done

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CLK_TCK=$(getconf CLK_TCK)

log() { printf '[compare-l7 %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

# ---------------------------------------------------------------- process tracking
PIDS=()          # every long-lived process this script started
WRK_PID=""       # the wrk run in flight, if any

descendants() { # PID -> PIDs of all its descendants (scan of /proc, no pgrep by name)
    local root=$1 changed=1 p s ppid
    local -A set=([$root]=1)
    local -a stats=()
    for p in /proc/[0-9]*/stat; do
        { s=$(<"$p"); } 2>/dev/null || continue
        stats+=("$s")
    done
    while ((changed)); do
        changed=0
        for s in "${stats[@]}"; do
            p=${s%% *}
            [[ -n ${set[$p]:-} ]] && continue
            s=${s##*) }
            read -r _ ppid _ <<<"$s"
            if [[ -n ${set[$ppid]:-} ]]; then set[$p]=1; changed=1; fi
        done
    done
    for p in "${!set[@]}"; do [[ $p == "$root" ]] || echo "$p"; done
}

stop_pid() { # TERM, a second TERM (switchyard: exit at once), then KILL, by PID only
    local pid=$1 i kids
    kill -0 "$pid" 2>/dev/null || return 0
    kids=$(descendants "$pid" | tr '\n' ' ')
    kill -TERM "$pid" 2>/dev/null || true
    for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -TERM "$pid" 2>/dev/null || true
    for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    for k in $kids; do kill -KILL "$k" 2>/dev/null || true; done
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [[ -n $WRK_PID ]] && { kill -TERM "$WRK_PID" 2>/dev/null || true; wait "$WRK_PID" 2>/dev/null || true; }
    local i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${PIDS[i]}"; done
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- /proc readings
proc_ticks() { # PID... -> utime+stime (clock ticks) of these processes, all threads each
    local p s total=0
    local -a f
    for p in "$@"; do
        { s=$(<"/proc/$p/stat"); } 2>/dev/null || continue
        s=${s##*) }               # fields from 3 (state) on; comm may hold spaces
        read -r -a f <<<"$s"
        total=$((total + f[11] + f[12]))   # fields 14 (utime) and 15 (stime)
    done
    echo "$total"
}

core_ticks() { # CPU -> "busy total" ticks of one core from /proc/stat
    awk -v c="cpu$1" '$1 == c { busy = $2 + $3 + $4 + $7 + $8 + $9; print busy, busy + $5 + $6 }' /proc/stat
}

wait_port() { # PORT PID NAME
    local port=$1 pid=$2 name=$3 i
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || { tail -20 "$OUT/$name.log" >&2 || true; die "$name (pid $pid) exited during start-up"; }
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        sleep 0.1
    done
    die "$name did not listen on 127.0.0.1:$port within 10 s"
}

# ---------------------------------------------------------------- ports and names
P_A=$((BASE_PORT + 1)); P_B=$((BASE_PORT + 2)); P_C=$((BASE_PORT + 3))
declare -A PORT=([switchyard]=$((BASE_PORT + 11)) [haproxy]=$((BASE_PORT + 12)) [nginx]=$((BASE_PORT + 13)))
declare -A PID_OF=() VERSION=()

list=()
for p in $PROXIES; do
    case $p in
        switchyard | haproxy) list+=("$p") ;;
        nginx) if command -v nginx >/dev/null; then list+=(nginx); else log "nginx not installed: skipped"; fi ;;
        *) die "unknown proxy '$p' in PROXIES" ;;
    esac
done
PROXIES=("${list[@]}")
((${#PROXIES[@]} > 0)) || die "no proxy to measure"

for port in $P_A $P_B $P_C "${PORT[@]}"; do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && die "port $port already in use (set BASE_PORT)"
done

# ---------------------------------------------------------------- switchyard binary
if [[ -n ${SWITCHYARD_BIN:-} ]]; then
    SW=$SWITCHYARD_BIN
else
    log "building switchyard (cargo build --release -p switchyard)"
    (cd "$ROOT" && cargo build --release -p switchyard) >&2
    SW=$ROOT/target/release/switchyard
fi
[[ -x $SW ]] || die "no switchyard binary at $SW"

# ---------------------------------------------------------------- environment record
SW_REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD 2>/dev/null || SW_REV="$SW_REV+dirty"
# (sed -n 1p reads all of its input: no SIGPIPE under pipefail)
VERSION[switchyard]="$("$SW" --version 2>/dev/null | sed -n 1p) ($SW_REV)"
VERSION[haproxy]=$(haproxy -v 2>&1 | sed -n '1s/ - https.*//p')
if command -v nginx >/dev/null; then VERSION[nginx]=$(nginx -v 2>&1 | sed -n '1s/^nginx version: //p'); fi
CPU_MODEL=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | sed -n 1p)
KERNEL=$(uname -sr)
NCPU=$(nproc)
lscpu >"$OUT/lscpu.txt" 2>&1 || true
LOADAVG_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
((NCPU >= 2)) || log "warning: only $NCPU CPU(s) visible; pinning to cores $PROXY_CPU/$LOAD_CPU may fail"

# ---------------------------------------------------------------- configs
cat >"$OUT/switchyard.toml" <<EOF
# generated by scripts/compare-l7.sh
workers = 1

[[service]]
name = "bench"
listen = "127.0.0.1:${PORT[switchyard]}"
pool = "main"
rules = [ { path_suffix = ".png", pool = "images" } ]
# x_forwarded_for = true and x_forwarded_proto = true: the defaults

[[pool]]
name = "main"
balance = "round-robin"
servers = [
  { address = "127.0.0.1:$P_A", name = "a" },
  { address = "127.0.0.1:$P_B", name = "b" },
]

[[pool]]
name = "images"
servers = [ { address = "127.0.0.1:$P_C", name = "c" } ]
EOF

cat >"$OUT/haproxy.cfg" <<EOF
# generated by scripts/compare-l7.sh
global
    nbthread 1
    maxconn 4096
    # no log lines: nothing is logged

defaults
    mode http
    option http-keep-alive
    option forwardfor
    http-reuse $HAPROXY_REUSE
    timeout connect 3s
    timeout client 60s
    timeout server 30s
    timeout http-request 10s
    timeout http-keep-alive 60s

frontend bench
    bind 127.0.0.1:${PORT[haproxy]}
    http-request set-header X-Forwarded-Proto http
    use_backend images if { path_end .png }
    default_backend main

backend main
    balance roundrobin
    server a 127.0.0.1:$P_A
    server b 127.0.0.1:$P_B

backend images
    server c 127.0.0.1:$P_C
EOF

mkdir -p "$OUT/nginx-tmp"
cat >"$OUT/nginx.conf" <<EOF
# generated by scripts/compare-l7.sh
worker_processes 1;
daemon off;
pid $OUT/nginx.pid;
error_log $OUT/nginx.log warn;

events {
    worker_connections 4096;
}

http {
    access_log off;
    client_body_temp_path $OUT/nginx-tmp/body;
    proxy_temp_path $OUT/nginx-tmp/proxy;
    fastcgi_temp_path $OUT/nginx-tmp/fastcgi;
    uwsgi_temp_path $OUT/nginx-tmp/uwsgi;
    scgi_temp_path $OUT/nginx-tmp/scgi;
    keepalive_timeout 60s;
    keepalive_requests 1000000;

    upstream main {
        server 127.0.0.1:$P_A;
        server 127.0.0.1:$P_B;
        keepalive 64;
        keepalive_requests 1000000;
    }
    upstream images {
        server 127.0.0.1:$P_C;
        keepalive 64;
        keepalive_requests 1000000;
    }

    server {
        listen 127.0.0.1:${PORT[nginx]};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto \$scheme;

        location ~ \.png\$ {
            proxy_pass http://images;
        }
        location / {
            proxy_pass http://main;
        }
    }
}
EOF

log "checking configs"
"$SW" check -c "$OUT/switchyard.toml" >"$OUT/switchyard-check.log" 2>&1 || { cat "$OUT/switchyard-check.log" >&2; die "switchyard check refused the config"; }
haproxy -c -f "$OUT/haproxy.cfg" >"$OUT/haproxy-check.log" 2>&1 || { cat "$OUT/haproxy-check.log" >&2; die "haproxy -c refused the config"; }
if [[ " ${PROXIES[*]} " == *" nginx "* ]]; then
    nginx -t -p "$OUT" -c "$OUT/nginx.conf" -e "$OUT/nginx-check.log" >"$OUT/nginx-check.log" 2>&1 || { cat "$OUT/nginx-check.log" >&2; die "nginx -t refused the config"; }
fi

# ---------------------------------------------------------------- wrk script
if ((PNG_EVERY > 0)); then
    cat >"$OUT/mix.lua" <<EOF
-- $((PNG_EVERY - 1)) x /index.html, then 1 x /img/logo.png, repeated; requests pre-formatted
local reqs, i = {}, 0
init = function(args)
    for k = 1, $PNG_EVERY - 1 do reqs[k] = wrk.format("GET", "/index.html") end
    reqs[$PNG_EVERY] = wrk.format("GET", "/img/logo.png")
end
request = function()
    i = i % $PNG_EVERY + 1
    return reqs[i]
end
EOF
    WRK_SCRIPT=(-s "$OUT/mix.lua")
    WRK_PATH=/
    MIX="1 in $PNG_EVERY requests /img/logo.png, the rest /index.html"
else
    WRK_SCRIPT=()
    WRK_PATH=/
    MIX="every request GET /"
fi
WRK_HDR=()
[[ $MODE == close ]] && WRK_HDR=(-H "Connection: close")

# ---------------------------------------------------------------- origins
start_bg() { # NAME CORE CMD... : start pinned, stderr+stdout to OUT/NAME.log, record PID
    local name=$1 core=$2; shift 2
    taskset -c "$core" "$@" >"$OUT/$name.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    PID_OF[$name]=$pid
}

log "starting origins on core $LOAD_CPU (ports $P_A $P_B $P_C)"
start_bg origin-a "$LOAD_CPU" "$SW" origin --listen "127.0.0.1:$P_A" --name main-a --threads 1
start_bg origin-b "$LOAD_CPU" "$SW" origin --listen "127.0.0.1:$P_B" --name main-b --threads 1
start_bg origin-c "$LOAD_CPU" "$SW" origin --listen "127.0.0.1:$P_C" --name images-c --threads 1
wait_port "$P_A" "${PID_OF[origin-a]}" origin-a
wait_port "$P_B" "${PID_OF[origin-b]}" origin-b
wait_port "$P_C" "${PID_OF[origin-c]}" origin-c

# ---------------------------------------------------------------- proxies
for p in "${PROXIES[@]}"; do
    log "starting $p on core $PROXY_CPU (port ${PORT[$p]})"
    case $p in
        switchyard) start_bg switchyard "$PROXY_CPU" "$SW" run -c "$OUT/switchyard.toml" ;;
        haproxy) start_bg haproxy "$PROXY_CPU" haproxy -db -f "$OUT/haproxy.cfg" ;;
        nginx) start_bg nginx "$PROXY_CPU" nginx -p "$OUT" -c "$OUT/nginx.conf" -e "$OUT/nginx.log" ;;
    esac
    wait_port "${PORT[$p]}" "${PID_OF[$p]}" "$p"
done

# ---------------------------------------------------------------- function check
header_of() { # URL HEADER -> value (lower-case name match), also checks status 200
    local url=$1 name=$2 headers code
    headers=$(curl -sS --max-time 5 -D - -o /dev/null "$url") || return 1
    code=$(printf '%s' "$headers" | awk 'NR == 1 { print $2 }')
    [[ $code == 200 ]] || { echo "status:$code"; return 0; }
    printf '%s' "$headers" | tr -d '\r' | awk -v n="$name" '!done && tolower($1) == tolower(n) ":" { $1 = ""; sub(/^ /, ""); print; done = 1 }'
}

verify() {
    local p=$1 base="http://127.0.0.1:${PORT[$p]}" got seen="" i len xff xfp
    got=$(header_of "$base/img/logo.png" x-origin) || die "$p: request for /img/logo.png failed"
    [[ $got == images-c ]] || die "$p: /img/logo.png reached '$got', expected images-c (the .png rule)"
    len=$(header_of "$base/img/logo.png" content-length)
    [[ $len == 128 ]] || die "$p: /img/logo.png content-length '$len', expected 128"
    for i in 1 2 3 4 5 6; do
        got=$(header_of "$base/index.html" x-origin) || die "$p: request for /index.html failed"
        [[ $got == main-a || $got == main-b ]] || die "$p: /index.html reached '$got', expected main-a or main-b"
        [[ " $seen " == *" $got "* ]] || seen="$seen $got"
    done
    got=$(header_of "$base/" x-origin)
    [[ $got == main-a || $got == main-b ]] || die "$p: / reached '$got', expected main-a or main-b"
    [[ $seen == *main-a* && $seen == *main-b* ]] || log "warning: $p sent 6 non-png requests only to:$seen (round robin expected both)"
    # forwarding headers as the origin received them
    got=$(curl -sS --max-time 5 "$base/__origin/request") || die "$p: /__origin/request failed"
    printf '%s\n' "$got" >"$OUT/verify-$p-request.json"
    xff=$(jq -r '[.headers[] | select(.[0] | ascii_downcase == "x-forwarded-for") | .[1]] | join(",")' <<<"$got")
    xfp=$(jq -r '[.headers[] | select(.[0] | ascii_downcase == "x-forwarded-proto") | .[1]] | join(",")' <<<"$got")
    [[ $xff == *127.0.0.1* ]] || die "$p: origin saw X-Forwarded-For '$xff', expected the client address"
    [[ $xfp == http ]] || die "$p: origin saw X-Forwarded-Proto '$xfp', expected http"
    log "$p: function ok (.png -> images-c, others ->$seen, XFF=$xff, XFP=$xfp)"
}
for p in "${PROXIES[@]}"; do verify "$p"; done

# ---------------------------------------------------------------- measurement
run_wrk() { # SECONDS URL OUTFILE TIMEFILE
    local secs=$1 url=$2 outf=$3 timef=$4 rc=0
    local timecmd=()
    [[ -x /usr/bin/time ]] && timecmd=(/usr/bin/time -f "%e %U %S" -o "$timef")
    timeout --signal=KILL $((secs + 30)) taskset -c "$LOAD_CPU" "${timecmd[@]}" \
        wrk -t"$THREADS" -c"$CONNS" -d"${secs}s" --latency "${WRK_HDR[@]}" "${WRK_SCRIPT[@]}" "$url" >"$outf" 2>&1 &
    WRK_PID=$!
    wait "$WRK_PID" || rc=$?
    WRK_PID=""
    return "$rc"
}

to_us() { # wrk latency "1.23ms" / "456.78us" / "1.02s" -> microseconds
    awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) m = 1; else if (v ~ /ms$/) m = 1000; else if (v ~ /m$/) m = 60e6; else if (v ~ /s$/) m = 1e6; else m = 0; printf "%.1f", n * m }'
}

TSV=$OUT/runs.tsv
printf 'proxy\trep\trequests\twall_s\trps\tlat_avg_us\tlat_p50_us\tlat_p99_us\tnon2xx\tsock_errors\tproxy_cpu_s\tus_per_req\tproxy_util\tcore0_busy\tcore1_busy\twrk_cpu_s\torigins_cpu_s\n' >"$TSV"

measure() { # PROXY REP
    local p=$1 rep=$2 url="http://127.0.0.1:${PORT[$p]}$WRK_PATH" base="$OUT/wrk-$p-$rep"
    local pid=${PID_OF[$p]} t0 t1 c0a c0b c1a c1b o0 o1 s0 s1 tag
    log "$p run $rep: warm-up ${WARMUP}s"
    if ((WARMUP > 0)); then run_wrk "$WARMUP" "$url" "$base-warmup.txt" "$base-warmup.time" || true; fi
    kill -0 "$pid" 2>/dev/null || die "$p (pid $pid) died during warm-up; see $OUT/$p.log"
    log "$p run $rep: measuring ${DURATION}s"
    local opids="${PID_OF[origin-a]} ${PID_OF[origin-b]} ${PID_OF[origin-c]}"
    local ppids="$pid $(descendants "$pid" | tr '\n' ' ')"   # nginx: master + worker
    o0=$(proc_ticks $opids)
    read -r c0a c0b < <(core_ticks "$PROXY_CPU")
    read -r c1a c1b < <(core_ticks "$LOAD_CPU")
    t0=$(proc_ticks $ppids)
    s0=$(date +%s.%N)
    run_wrk "$DURATION" "$url" "$base.txt" "$base.time" || log "warning: wrk exited non-zero for $p run $rep"
    s1=$(date +%s.%N)
    t1=$(proc_ticks $ppids)
    read -r c0c c0d < <(core_ticks "$PROXY_CPU")
    read -r c1c c1d < <(core_ticks "$LOAD_CPU")
    o1=$(proc_ticks $opids)
    kill -0 "$pid" 2>/dev/null || die "$p (pid $pid) died during the measured run; see $OUT/$p.log"

    local requests rps avg p50 p99 non2xx sockerr wall wrkcpu
    requests=$(awk '/requests in/ { print $1; exit }' "$base.txt")
    [[ -n $requests ]] || { cat "$base.txt" >&2; die "$p run $rep: no 'N requests in' line from wrk"; }
    rps=$(awk '/^Requests\/sec:/ { print $2 }' "$base.txt")
    avg=$(to_us "$(awk '$1 == "Latency" && NF >= 4 { print $2; exit }' "$base.txt")")
    p50=$(to_us "$(awk '$1 == "50%" { print $2; exit }' "$base.txt")")
    p99=$(to_us "$(awk '$1 == "99%" { print $2; exit }' "$base.txt")")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$base.txt"); non2xx=${non2xx:-0}
    sockerr=$(awk '/Socket errors:/ { gsub(/,/, ""); print $4 + $6 + $8 + $10 }' "$base.txt"); sockerr=${sockerr:-0}
    wall=$(awk -v a="$s0" -v b="$s1" 'BEGIN { printf "%.3f", b - a }')
    wrkcpu=NA
    [[ -s $base.time ]] && wrkcpu=$(awk 'END { printf "%.3f", $2 + $3 }' "$base.time")
    awk -v OFS='\t' -v p="$p" -v rep="$rep" -v req="$requests" -v wall="$wall" -v rps="$rps" \
        -v avg="$avg" -v p50="$p50" -v p99="$p99" -v n2="$non2xx" -v se="$sockerr" \
        -v t="$((t1 - t0))" -v hz="$CLK_TCK" -v dur="$DURATION" \
        -v c0="$((c0c - c0a))" -v c0t="$((c0d - c0b))" -v c1="$((c1c - c1a))" -v c1t="$((c1d - c1b))" \
        -v wc="$wrkcpu" -v oc="$((o1 - o0))" 'BEGIN {
            cpu = t / hz
            print p, rep, req, wall, rps, avg, p50, p99, n2, se, sprintf("%.2f", cpu),
                  sprintf("%.2f", req > 0 ? cpu * 1e6 / req : 0), sprintf("%.3f", cpu / dur),
                  sprintf("%.3f", c0t > 0 ? c0 / c0t : 0), sprintf("%.3f", c1t > 0 ? c1 / c1t : 0),
                  wc, sprintf("%.2f", oc / hz)
        }' >>"$TSV"
    log "$p run $rep: $(tail -1 "$TSV" | awk -F'\t' '{ printf "%s req, %s req/s, %s us CPU/req, proxy %.0f%% of a core, core%s busy %.0f%%, core%s busy %.0f%%", $3, $5, $12, $13 * 100, "'"$PROXY_CPU"'", $14 * 100, "'"$LOAD_CPU"'", $15 * 100 }')"
}

for ((rep = 1; rep <= REPEATS; rep++)); do
    for p in "${PROXIES[@]}"; do measure "$p" "$rep"; done
done

# ---------------------------------------------------------------- report
LOADAVG_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
export LOADAVG_BEFORE LOADAVG_AFTER OUT MODE DURATION WARMUP REPEATS CONNS THREADS MIX HAPROXY_REUSE PROXY_CPU LOAD_CPU CLK_TCK \
    CPU_MODEL KERNEL NCPU STAMP
export V_SWITCHYARD=${VERSION[switchyard]} V_HAPROXY=${VERSION[haproxy]} V_NGINX=${VERSION[nginx]:-}
python3 "$HERE/lib/compare_l7_report.py" "$TSV"
