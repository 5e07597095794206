#!/usr/bin/env bash
# measure-tracing.sh: proxy CPU time per request at L7 keep-alive, 128 B responses, with
# tracing off, on at sample ratio 0, 0.01 and 1 (and, when BASE_BIN is given, a binary
# without tracing built from another commit), all in the same run.
#
# On-demand measurement, not part of the test suite. The figure is CPU time of the proxy
# (utime+stime from /proc/PID/stat) over a load run (`switchyard bench load`, keep-alive,
# closed loop), divided by the requests the proxy counted over the same window
# (`switchyard_requests_total` from its admin listener). Each proxy has one
# worker pinned to PROXY_CPU; the origin, the OTLP sink and the generator share LOAD_CPU.
# The OTLP sink is `switchyard origin` (answers every POST with 200 after reading the
# body): the proxy's whole export cost is counted, the collector's decoding is not.
# Runs are interleaved (off, 0, 0.01, 1, base, off, ...) REPEATS times.
#
# Environment: SWITCHYARD_BIN (default target/release/switchyard), BASE_BIN (optional),
# DURATION=10, REPEATS=3, CONNS=50, PROXY_CPU=0, LOAD_CPU=1, BASE_PORT=28300.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${SWITCHYARD_BIN:-$ROOT/target/release/switchyard}
BASE_BIN=${BASE_BIN:-}
DURATION=${DURATION:-10}
REPEATS=${REPEATS:-3}
CONNS=${CONNS:-50}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
BASE_PORT=${BASE_PORT:-28300}
OUT=$(mktemp -d /tmp/measure-tracing.XXXX)
CLK_TCK=$(getconf CLK_TCK)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

ORIGIN=127.0.0.1:$((BASE_PORT + 1))
SINK=127.0.0.1:$((BASE_PORT + 2))
taskset -c "$LOAD_CPU" "$BIN" origin --listen "$ORIGIN" --name o1 >"$OUT/origin.log" 2>&1 & PIDS+=($!)
taskset -c "$LOAD_CPU" "$BIN" origin --listen "$SINK" --name sink >"$OUT/sink.log" 2>&1 & PIDS+=($!)

declare -A PORT PID
NAMES=(off ratio-0 ratio-0.01 ratio-1)
[[ -n $BASE_BIN ]] && NAMES+=(base)
i=10
for name in "${NAMES[@]}"; do
    port=$((BASE_PORT + i)); i=$((i + 1)); PORT[$name]=$port
    {
        printf 'workers = 1\n[[service]]\nname = "web"\nlisten = "127.0.0.1:%s"\npool = "main"\n' "$port"
        printf '[[pool]]\nname = "main"\nservers = [{ address = "%s" }]\n' "$ORIGIN"
        printf '[admin]\nlisten = "127.0.0.1:%s"\n' "$((port + 50))"
        case $name in
            ratio-*) printf '[tracing]\nendpoint = "http://%s/v1/traces"\nsample_ratio = %s\ninterval = "1s"\n' \
                "$SINK" "${name#ratio-}" ;;
        esac
    } >"$OUT/$name.toml"
    bin=$BIN; [[ $name == base ]] && bin=$BASE_BIN
    taskset -c "$PROXY_CPU" "$bin" run -c "$OUT/$name.toml" >"$OUT/$name.log" 2>&1 & PIDS+=($!); PID[$name]=$!
done
sleep 1
for name in "${NAMES[@]}"; do
    curl -sf -o /dev/null "http://127.0.0.1:${PORT[$name]}/" || { echo "$name does not answer" >&2; exit 1; }
done

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
served() { # requests the proxy on port $1 counted
    curl -sf "http://127.0.0.1:$(($1 + 50))/metrics" | sed -n 's/^switchyard_requests_total{service="web"} //p'
}
printf 'run\ttarget\trequests\terrors\tcpu_ticks\tus_per_request\n' | tee "$OUT/runs.tsv"
for r in $(seq 1 "$REPEATS"); do
    for name in "${NAMES[@]}"; do
        n0=$(served "${PORT[$name]}"); c0=$(cpu "${PID[$name]}")
        line=$(taskset -c "$LOAD_CPU" "$BIN" bench load --target "127.0.0.1:${PORT[$name]}" \
            --connections "$CONNS" --duration "$DURATION" --path "/?size=128")
        c1=$(cpu "${PID[$name]}"); n1=$(served "${PORT[$name]}")
        req=$((n1 - n0))
        err=$(sed -n 's/.*errors=\([0-9]*\).*/\1/p' <<<"$line")
        us=$(python3 -c "print('%.2f' % (($c1 - $c0) * 1e6 / $CLK_TCK / $req))")
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$name" "$req" "$err" "$((c1 - c0))" "$us" | tee -a "$OUT/runs.tsv"
    done
done
python3 - "$OUT/runs.tsv" <<'PY'
import sys, statistics, collections
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
by = collections.OrderedDict()
for r in rows:
    by.setdefault(r[1], []).append(float(r[5]))
print("\ntarget\tmedian_us\tmin_us\tmax_us\truns")
for k, v in by.items():
    print(f"{k}\t{statistics.median(v):.2f}\t{min(v):.2f}\t{max(v):.2f}\t{len(v)}")
PY
echo "files in $OUT"
