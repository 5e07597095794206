#!/usr/bin/env bash
# measure-cps.sh: proxy CPU per connection, user and kernel apart, at one request per
# connection (L7 CPS and L4 CPS, 128 B), for two switchyard binaries and HAProxy in the
# same run, interleaved.
#
# On-demand measurement, not part of the test suite. wrk sends `Connection: close` (unless
# KEEPALIVE=1: then the figures are per request over kept-alive connections), so each
# connection carries one request; the proxy's utime and stime come from /proc before and
# after each measured wrk run. Layout: proxy on core 0, origins and wrk on core 1.
#
# Environment (all optional):
#   BEFORE=path AFTER=path   the two switchyard binaries (default: AFTER only, target/release)
#   DURATION=5 ROUNDS=3 CONNS=50 SIZE=128 BASE_PORT=29000 PROXY_CPU=0 LOAD_CPU=1
#   KEEPALIVE=1              no `Connection: close`: per request on kept-alive connections
#                            (L4: the relay's per-message path, L7: keep-alive)
#   OUT                      output folder (default bench-out/measure-cps-<timestamp>)
#   SYSCALLS=1               after the measured rounds, one more wrk run per target under
#                            `perf stat` (syscall tracepoints, attached to the proxy; wrk is
#                            perf's workload, so the count spans exactly the wrk run), with
#                            `net:net_dev_queue`: packets sent from the proxy's context, the
#                            drift-free part of its kernel cost (a response whose FIN rides
#                            on its last segment saves one, and the peer's acknowledgement)
# Output: OUT/runs.tsv (one line per run: mode, target, round, requests, user_s, sys_s,
# µs user, µs kernel, µs total per request), OUT/syscalls-MODE-TARGET.csv with the wrk
# output beside it, and OUT/summary.txt (medians, calls per connection), printed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-50}
SIZE=${SIZE:-128}
BASE_PORT=${BASE_PORT:-29000}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
AFTER=${AFTER:-$ROOT/target/release/switchyard}
BEFORE=${BEFORE:-}
OUT=${OUT:-$ROOT/bench-out/measure-cps-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
TCK=$(getconf CLK_TCK)
SYSCALLS=${SYSCALLS:-1}
KEEPALIVE=${KEEPALIVE:-0}
CLOSE=(-H 'Connection: close')
[[ $KEEPALIVE == 1 ]] && CLOSE=()
EVENTS=raw_syscalls:sys_enter,net:net_dev_queue
for c in accept4 close connect epoll_ctl epoll_wait fcntl getsockopt getsockname ioctl pipe2 read readv recvfrom \
    sendto sendmsg setsockopt shutdown socket splice write writev futex mmap munmap brk; do
    EVENTS+=",syscalls:sys_enter_$c"
done

# Every process started, by PID (start() runs in a subshell, so the list is a file).
: >"$OUT/pids"
cleanup() { while read -r p; do kill "$p" 2>/dev/null || true; done <"$OUT/pids"; }
trap cleanup EXIT

o1=$((BASE_PORT + 1)) o2=$((BASE_PORT + 2)) o3=$((BASE_PORT + 3))
for i in 1 2 3; do
    taskset -c "$LOAD_CPU" "$AFTER" origin --listen "127.0.0.1:$((BASE_PORT + i))" --name "o$i" --threads 1 \
        >"$OUT/origin-$i.log" 2>&1 &
    echo $! >>"$OUT/pids"
done

# Configurations: switchyard L7 and L4, HAProxy L7 and L4 (one worker each).
sy_conf() { # mode port
    if [[ $1 == l7 ]]; then
        printf 'workers = 1\ndrain_timeout = "1s"\n[[service]]\nname = "b"\nlisten = "127.0.0.1:%s"\npool = "main"\nrules = [ { path_suffix = ".png", pool = "images" } ]\n[[pool]]\nname = "main"\nservers = [ { address = "127.0.0.1:%s", name = "a" }, { address = "127.0.0.1:%s", name = "b" } ]\n[[pool]]\nname = "images"\nservers = [ { address = "127.0.0.1:%s", name = "c" } ]\n' "$2" "$o1" "$o2" "$o3"
    else
        printf 'workers = 1\ndrain_timeout = "1s"\n[[service]]\nname = "b"\nlisten = "127.0.0.1:%s"\nmode = "tcp"\npool = "main"\n[[pool]]\nname = "main"\nservers = [ { address = "127.0.0.1:%s", name = "a" }, { address = "127.0.0.1:%s", name = "b" } ]\n' "$2" "$o1" "$o2"
    fi
}
ha_conf() { # mode port
    local mode=http extra="  option http-keep-alive" reuse="  http-reuse always"
    [[ $1 == l4 ]] && { mode=tcp; extra=""; reuse=""; }
    printf 'global\n  nbthread 1\n  maxconn 9000\ndefaults\n  mode %s\n  timeout client 30s\n  timeout server 30s\n  timeout connect 5s\n%s\nfrontend f\n  bind 127.0.0.1:%s\n  default_backend main\nbackend main\n  balance roundrobin\n%s\n  server a 127.0.0.1:%s\n  server b 127.0.0.1:%s\n' \
        "$mode" "$extra" "$2" "$reuse" "$o1" "$o2"
}

cpu_ticks() { # pid -> "utime stime" of the process (all threads)
    awk '{sub(/.*\) /, ""); print $12, $13}' "/proc/$1/stat"
}

run_one() { # mode target round port pid
    local mode=$1 target=$2 round=$3 port=$4 pid=$5
    taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d1s "${CLOSE[@]}" "http://127.0.0.1:$port/index.html?size=$SIZE" >/dev/null 2>&1 || true
    read -r u0 s0 < <(cpu_ticks "$pid")
    local w
    w=$(taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" "${CLOSE[@]}" "http://127.0.0.1:$port/index.html?size=$SIZE" 2>&1) || true
    read -r u1 s1 < <(cpu_ticks "$pid")
    local req
    req=$(awk '/requests in/ {print $1}' <<<"$w")
    echo "$w" >"$OUT/wrk-$mode-$target-$round.txt"
    if [[ -z $req || $req == 0 ]]; then
        echo "$mode $target round $round: no request completed (see wrk-$mode-$target-$round.txt)" >&2
        return 0
    fi
    awk -v m="$mode" -v t="$target" -v r="$round" -v n="$req" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$TCK" \
        'BEGIN { us = u / hz; ss = s / hz; printf "%s\t%s\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\n", m, t, r, n, us, ss, us * 1e6 / n, ss * 1e6 / n, (us + ss) * 1e6 / n }' \
        | tee -a "$OUT/runs.tsv"
}

start() { # target mode port -> pid
    local target=$1 mode=$2 port=$3 conf="$OUT/$1-$2.conf"
    case $target in
        haproxy) ha_conf "$mode" "$port" >"$conf"; taskset -c "$PROXY_CPU" haproxy -db -f "$conf" >"$OUT/$target-$mode.log" 2>&1 & ;;
        before) sy_conf "$mode" "$port" >"$conf"; taskset -c "$PROXY_CPU" "$BEFORE" run -c "$conf" >"$OUT/$target-$mode.log" 2>&1 & ;;
        after) sy_conf "$mode" "$port" >"$conf"; taskset -c "$PROXY_CPU" "$AFTER" run -c "$conf" >"$OUT/$target-$mode.log" 2>&1 & ;;
    esac
    local pid=$!
    echo "$pid" >>"$OUT/pids"
    for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/index.html?size=$SIZE" && break; sleep 0.1; done
    echo "$pid"
}

targets=(after haproxy)
[[ -n $BEFORE ]] && targets=(before after haproxy)
printf 'mode\ttarget\tround\trequests\tuser_s\tsys_s\tus_user\tus_kernel\tus_total\n' >"$OUT/runs.tsv"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/summary.txt"
for mode in l7 l4; do
    declare -A pid=()
    port=$((BASE_PORT + 10))
    for t in "${targets[@]}"; do
        port=$((port + 1))
        pid[$t]=$(start "$t" "$mode" "$port")
        eval "port_$t=$port"
    done
    for round in $(seq "$ROUNDS"); do
        for t in "${targets[@]}"; do
            p="port_$t"
            run_one "$mode" "$t" "$round" "${!p}" "${pid[$t]}"
        done
    done
    if [[ $SYSCALLS == 1 ]]; then
        for t in "${targets[@]}"; do
            p="port_$t"
            perf stat -x, -o "$OUT/syscalls-$mode-$t.csv" -e "$EVENTS" -p "${pid[$t]}" -- \
                taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d2s "${CLOSE[@]}" \
                "http://127.0.0.1:${!p}/index.html?size=$SIZE" >"$OUT/syscalls-$mode-$t.wrk" 2>&1 || true
        done
    fi
    for t in "${targets[@]}"; do kill "${pid[$t]}"; wait "${pid[$t]}" 2>/dev/null || true; done
    unset pid
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.txt"
KEEPALIVE=$KEEPALIVE python3 - "$OUT/runs.tsv" <<'EOF' | tee -a "$OUT/summary.txt"
import csv, os, re, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
out = os.path.dirname(sys.argv[1])
unit = "req" if os.environ.get("KEEPALIVE") == "1" else "conn"
print(f"mode target  median µs/{unit}: user kernel total  (runs)")
for mode in ("l7", "l4"):
    for t in ("before", "after", "haproxy"):
        rs = [r for r in rows if r["mode"] == mode and r["target"] == t]
        if not rs:
            continue
        med = lambda k: statistics.median(float(r[k]) for r in rs)
        tot = [float(r["us_total"]) for r in rs]
        print(f"{mode} {t:8} {med('us_user'):6.1f} {med('us_kernel'):6.1f} {med('us_total'):6.1f}  ({min(tot):.1f}-{max(tot):.1f})")
print(f"system calls per {unit} (perf stat over one wrk run of 2 s)")
for mode in ("l7", "l4"):
    for t in ("before", "after", "haproxy"):
        csvf, wrkf = f"{out}/syscalls-{mode}-{t}.csv", f"{out}/syscalls-{mode}-{t}.wrk"
        if not (os.path.exists(csvf) and os.path.exists(wrkf)):
            continue
        m = re.search(r"(\d+) requests in", open(wrkf).read())
        if not m or int(m.group(1)) == 0:
            continue
        n = int(m.group(1))
        counts = {}
        for line in open(csvf):
            f = line.strip().split(",")
            if len(f) > 2 and f[0].isdigit():
                counts[f[2].split(":")[1].replace("sys_enter_", "")] = int(f[0])
        total = counts.pop("sys_enter", 0)
        packets = counts.pop("net_dev_queue", 0)
        top = sorted(counts.items(), key=lambda kv: -kv[1])
        named = ", ".join(f"{k} {v / n:.2f}" for k, v in top if v / n >= 0.05)
        print(f"{mode} {t:8} {total / n:5.1f}/{unit}: {named}; packets sent {packets / n:.2f}/{unit}")
EOF
