#!/usr/bin/env bash
# scripts/soak.sh [MINUTES] — the soak test (issue 9): the release binary in front of two
# origins on loopback, loaded at half its measured maximum for MINUTES (default 30) with
# `switchyard bench load` (open loop), a reload (SIGHUP) every minute and one origin killed
# (SIGKILL) and restarted every five minutes. The proxy's RSS is sampled every 5 s.
#
# Writes to OUT (default soak-out/<UTC timestamp>):
#   rss.csv      elapsed_s,rss_kib               (every 5 s)
#   load.csv     minute,requests,errors,rps,p50_us,p90_us,p99_us,p999_us,max_us  (one load run per minute)
#   events.csv   elapsed_s,event
#   summary.md   RSS at start / after warm-up / end and growth, requests, errors, latency
#   proxy.log, switchyard.toml
#
# Environment: RATE (skip the measurement: requests per second to offer), CONNECTIONS
# (default 64), BOUNCE_EVERY (minutes between two kills of origin b, default 5), WORKERS (proxy workers, default 1), BASE_PORT (default 28080: the proxy;
# origins on the next two ports), SWITCHYARD_BIN (default: target/release/switchyard under
# CARGO_TARGET_DIR or ./target, built when missing), OUT.
#
# Bounded: every load run has a duration and a `timeout`; the script ends by itself after
# about MINUTES + 1 minutes and stops only the processes it started, by PID.
set -euo pipefail

MINUTES=${1:-30}
[[ $MINUTES =~ ^[0-9]+$ && $MINUTES -ge 1 ]] || { echo "usage: $0 [MINUTES >= 1]" >&2; exit 2; }
CONNECTIONS=${CONNECTIONS:-64}
BOUNCE_EVERY=${BOUNCE_EVERY:-5}
WORKERS=${WORKERS:-1}
BASE_PORT=${BASE_PORT:-28080}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/soak-out/$(date -u +%Y%m%dT%H%M%SZ)}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${SWITCHYARD_BIN:-$TARGET_DIR/release/switchyard}

if [[ ! -x $BIN ]]; then
    echo "soak: building the release binary" >&2
    (cd "$ROOT" && cargo build --release -p switchyard >&2)
fi
mkdir -p "$OUT"

PROXY=127.0.0.1:$BASE_PORT
ORIGIN_A=127.0.0.1:$((BASE_PORT + 1))
ORIGIN_B=127.0.0.1:$((BASE_PORT + 2))
PIDS=()           # processes started here (origin B's current PID lives in a file)
B_PID_FILE=$OUT/.origin-b.pid

cleanup() {
    local pid
    for pid in "${PIDS[@]}" $(cat "$B_PID_FILE" 2>/dev/null); do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}" $(cat "$B_PID_FILE" 2>/dev/null); do
        wait "$pid" 2>/dev/null || true
    done
    rm -f "$B_PID_FILE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

START=$(date +%s)
elapsed() { echo $(($(date +%s) - START)); }
event() { echo "$(elapsed),$1" >>"$OUT/events.csv"; echo "soak: [$(elapsed)s] $1" >&2; }

wait_port() { # wait_port HOST:PORT — up to 10 s
    local i
    for i in $(seq 100); do
        (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "soak: nothing listens on $1" >&2
    return 1
}

start_origin() { # start_origin ADDR NAME — prints the PID
    "$BIN" origin --listen "$1" --name "$2" >/dev/null 2>&1 &
    echo $!
}

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

echo "elapsed_s,event" >"$OUT/events.csv"
PIDS+=("$(start_origin "$ORIGIN_A" a)")
start_origin "$ORIGIN_B" b >"$B_PID_FILE"
wait_port "$ORIGIN_A"
wait_port "$ORIGIN_B"

cat >"$OUT/switchyard.toml" <<EOF
workers = $WORKERS
drain_timeout = "5s"

[[service]]
name = "soak"
listen = ["$PROXY"]
pool = "origins"

[[pool]]
name = "origins"
retries = 1
servers = [{ address = "$ORIGIN_A", name = "a" }, { address = "$ORIGIN_B", name = "b" }]
health_check = { type = "tcp", interval = "1s", fall = 1, rise = 2 }
EOF
SWITCHYARD_LOG=info "$BIN" run -c "$OUT/switchyard.toml" 2>"$OUT/proxy.log" &
PROXY_PID=$!
PIDS+=("$PROXY_PID")
wait_port "$PROXY"
event "started: proxy pid $PROXY_PID, origins $ORIGIN_A $ORIGIN_B"

load() { # load SECONDS [RATE] — one run; prints its key=value line
    local rate_arg=()
    [[ -n ${2:-} ]] && rate_arg=(--rate "$2")
    timeout $(($1 + 60)) "$BIN" bench load --target "$PROXY" --connections "$CONNECTIONS" \
        --duration "$1" --path "/?size=1024" "${rate_arg[@]}" 2>>"$OUT/load.err"
}
field() { sed -n "s/.*\b$1=\([0-9.]*\).*/\1/p" <<<"$2"; }

if [[ -z ${RATE:-} ]]; then
    line=$(load 10)
    max=$(field rps "$line")
    RATE=$((${max%.*} / 2))
    event "measured maximum: $max requests/s (closed loop, $CONNECTIONS connections); offering $RATE"
else
    event "offering RATE=$RATE requests/s"
fi
[[ $RATE -gt 0 ]] || { echo "soak: no usable rate" >&2; exit 1; }

# RSS every 5 s, in the background.
echo "elapsed_s,rss_kib" >"$OUT/rss.csv"
(
    while kill -0 "$PROXY_PID" 2>/dev/null; do
        echo "$(elapsed),$(rss_kib "$PROXY_PID")" >>"$OUT/rss.csv"
        sleep 5
    done
) &
PIDS+=("$!")

# One minute-long load run after another, with the minute's events between them.
echo "minute,requests,errors,rps,p50_us,p90_us,p99_us,p999_us,max_us" >"$OUT/load.csv"
for minute in $(seq "$MINUTES"); do
    # The run takes a second of warm-up and about a second to set up: 58 s measured.
    (
        sleep 30
        if ((minute % BOUNCE_EVERY == 0)); then
            kill -KILL "$(cat "$B_PID_FILE")" 2>/dev/null || true
            event "origin b killed"
            sleep 5
            start_origin "$ORIGIN_B" b >"$B_PID_FILE"
            event "origin b restarted"
        fi
    ) &
    chaos=$!
    line=$(load 58 "$RATE")
    wait "$chaos" || true
    row="$minute"
    for k in requests errors rps p50_us p90_us p99_us p999_us max_us; do
        row+=",$(field "$k" "$line")"
    done
    echo "$row" >>"$OUT/load.csv"
    kill -0 "$PROXY_PID" 2>/dev/null || { event "the proxy died"; exit 1; }
    kill -HUP "$PROXY_PID"
    event "reload (SIGHUP) $minute"
done
sleep 5
echo "$(elapsed),$(rss_kib "$PROXY_PID")" >>"$OUT/rss.csv"
event "done"

# The summary.
python3 - "$OUT" "$MINUTES" "$RATE" <<'EOF'
import csv, statistics, sys
out, minutes, rate = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rss = [(int(r["elapsed_s"]), int(r["rss_kib"])) for r in csv.DictReader(open(f"{out}/rss.csv")) if r["rss_kib"] != "0"]
load = list(csv.DictReader(open(f"{out}/load.csv")))
events = list(csv.DictReader(open(f"{out}/events.csv")))
start_t = rss[0][0]
# Warm-up: the first 20 % of the run, at least one minute.
warm_t = start_t + max(60, minutes * 60 // 5)
warm = next((kib for t, kib in rss if t >= warm_t), rss[-1][1])
end = rss[-1][1]
growth = (end - warm) * 100.0 / warm
peak = max(kib for _, kib in rss)
num = lambda k: [float(r[k]) for r in load if r[k]]
requests, errors = int(sum(num("requests"))), int(sum(num("errors")))
reloads = sum(1 for e in events if e["event"].startswith("reload"))
bounces = sum(1 for e in events if e["event"] == "origin b killed")
with open(f"{out}/summary.md", "w") as f:
    f.write(f"# Soak: {minutes} min at {rate} requests/s\n\n")
    f.write(f"{reloads} reloads (SIGHUP), origin b killed (SIGKILL) and restarted {bounces} times.\n\n")
    f.write("| RSS | KiB |\n|---|---:|\n")
    f.write(f"| start | {rss[0][1]} |\n| after warm-up ({warm_t - start_t} s) | {warm} |\n| end | {end} |\n| peak | {peak} |\n")
    f.write(f"| growth after warm-up | {growth:+.1f} % |\n\n")
    f.write(f"Requests answered: {requests}; failed: {errors} ({errors * 100.0 / max(1, requests + errors):.4f} %).\n")
    f.write(f"Failures per minute: {', '.join(r['errors'] or '?' for r in load)}.\n\n")
    f.write("Latency (µs, from the scheduled send time), over the per-minute runs:\n\n")
    f.write("| | p50 | p90 | p99 | p99.9 | max |\n|---|---:|---:|---:|---:|---:|\n")
    cols = ["p50_us", "p90_us", "p99_us", "p999_us", "max_us"]
    f.write("| median minute | " + " | ".join(f"{statistics.median(num(c)):.0f}" for c in cols) + " |\n")
    f.write("| worst minute | " + " | ".join(f"{max(num(c)):.0f}" for c in cols) + " |\n")
print(open(f"{out}/summary.md").read())
EOF
echo "soak: results in $OUT" >&2
