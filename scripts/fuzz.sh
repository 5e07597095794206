#!/usr/bin/env bash
# Runs the cargo-fuzz targets under fuzz/ for a bounded time each and reports,
# per target: executions, corpus size, and any crash, timeout, leak or OOM.
# Exits non-zero when any target found one (its input is kept and named).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     default: 60 s, every target
#
# Environment:
#   FUZZ_JOBS=N        targets run N at a time (default 1); each is one libFuzzer process
#   FUZZ_WORK=DIR      where new corpus entries, logs and artifacts go (default: a
#                      temporary directory, removed at the end unless something was found)
#   FUZZ_MERGE=1       afterwards, minimize committed corpus + new finds back into
#                      fuzz/corpus/TARGET (cargo fuzz cmin); otherwise fuzz/ is left untouched
#   FUZZ_SANITIZER=S   address (default, also finds leaks) or none (faster)
#   CARGO_TARGET_DIR   honoured; default fuzz/target
#
# Needs a nightly toolchain (rustup toolchain install nightly) and cargo-fuzz
# (cargo install cargo-fuzz --locked). Everything runs under `nice -n 19`, and
# each target is stopped by libFuzzer after SECONDS (and killed at twice that
# plus five minutes, should it hang), so the script always ends by itself.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

ALL_TARGETS=(request_head chunked_body response_head proxy_protocol client_hello rdp_cookie config persistence_cookie rules deflate cache_fields http2_server http2_client hpack)

# Longest input per target: a little over what each parser ever looks at.
max_len() {
  case $1 in
    request_head | response_head) echo 65536 ;;
    client_hello) echo 17000 ;;
    proxy_protocol) echo 4200 ;;
    config) echo 16384 ;;
    rules) echo 8192 ;;
    rdp_cookie) echo 1100 ;;
    deflate) echo 262144 ;;
    http2_server | http2_client) echo 65536 ;;
    *) echo 4096 ;;
  esac
}

SECONDS_PER_TARGET=60
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
  SECONDS_PER_TARGET=$1
  shift
fi
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=("${ALL_TARGETS[@]}")
for t in "${TARGETS[@]}"; do
  if [[ ! " ${ALL_TARGETS[*]} " =~ " $t " ]]; then
    echo "unknown target: $t (targets: ${ALL_TARGETS[*]})" >&2
    exit 2
  fi
done
JOBS=${FUZZ_JOBS:-1}
SANITIZER=${FUZZ_SANITIZER:-address}

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "error: needs a nightly toolchain and cargo-fuzz:" >&2
  echo "  rustup toolchain install nightly && cargo install cargo-fuzz --locked" >&2
  exit 2
fi

if [[ -n ${FUZZ_WORK:-} ]]; then
  WORK=$FUZZ_WORK
  KEEP_WORK=1
else
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-fuzz.XXXXXX")
  KEEP_WORK=0
fi
mkdir -p "$WORK"
echo "== building fuzz targets (sanitizer: $SANITIZER)"
(cd fuzz && nice -n 19 cargo +nightly fuzz build --sanitizer "$SANITIZER" >"$WORK/build.log" 2>&1) || {
  tail -30 "$WORK/build.log" >&2
  echo "error: build failed (log: $WORK/build.log)" >&2
  exit 2
}

# Runs one target; its report line goes to $WORK/TARGET.result.
run_target() {
  local t=$1 new="$WORK/corpus/$t" art="$WORK/artifacts/$t/" log="$WORK/$t.log"
  mkdir -p "$new" "$art"
  local before
  before=$(find "fuzz/corpus/$t" -type f | wc -l)
  local started=$SECONDS status=0
  # New finds go to $new (libFuzzer writes to the first corpus directory); the
  # committed corpus is only read.
  (cd fuzz && timeout -k 30 $((SECONDS_PER_TARGET * 2 + 300)) nice -n 19 \
    cargo +nightly fuzz run --sanitizer "$SANITIZER" "$t" "$new" "corpus/$t" -- \
    -max_total_time="$SECONDS_PER_TARGET" -max_len="$(max_len "$t")" -timeout=10 \
    -artifact_prefix="$art" -print_final_stats=1 >"$log" 2>&1) || status=$?
  local took=$((SECONDS - started))
  local execs found added
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  found=$(find "$art" -type f | wc -l)
  added=$(find "$new" -type f | wc -l)
  local verdict=ok
  if [[ $found -gt 0 || $status -ne 0 ]]; then
    verdict="FOUND (exit $status): $(find "$art" -type f -printf '%f ' 2>/dev/null)"
  fi
  printf '%-20s %6ss %12s execs  corpus %5s + %5s new  %s\n' \
    "$t" "$took" "${execs:-?}" "$before" "$added" "$verdict" >"$WORK/$t.result"
}

echo "== fuzzing ${#TARGETS[@]} target(s), ${SECONDS_PER_TARGET}s each, $JOBS at a time (work: $WORK)"
running=0
for t in "${TARGETS[@]}"; do
  run_target "$t" &
  running=$((running + 1))
  if [[ $running -ge $JOBS ]]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

printf '\n%-20s %7s %12s        %s\n' target time executions "corpus (committed + new), verdict"
failed=0
for t in "${TARGETS[@]}"; do
  cat "$WORK/$t.result"
  grep -q ' ok$' "$WORK/$t.result" || failed=1
done

if [[ ${FUZZ_MERGE:-0} == 1 ]]; then
  echo
  echo "== minimizing corpora into fuzz/corpus/"
  for t in "${TARGETS[@]}"; do
    # The hand-written seeds stay whatever cmin thinks of them: they document the format.
    seeds="$WORK/seeds/$t"
    mkdir -p "$seeds"
    cp fuzz/corpus/"$t"/seed-* "$seeds/" 2>/dev/null || true
    cp -n "$WORK/corpus/$t"/* "fuzz/corpus/$t/" 2>/dev/null || true
    local_before=$(find "fuzz/corpus/$t" -type f | wc -l)
    (cd fuzz && nice -n 19 cargo +nightly fuzz cmin --sanitizer "$SANITIZER" "$t" "corpus/$t" -- \
      -max_len="$(max_len "$t")" >"$WORK/$t.cmin.log" 2>&1) || echo "$t: cmin failed (log: $WORK/$t.cmin.log)"
    cp -n "$seeds"/* "fuzz/corpus/$t/" 2>/dev/null || true
    printf '%-20s corpus %5s -> %5s files, %s\n' "$t" "$local_before" \
      "$(find "fuzz/corpus/$t" -type f | wc -l)" "$(du -sh --apparent-size "fuzz/corpus/$t" | cut -f1)"
  done
fi

if [[ $failed -ne 0 ]]; then
  echo
  echo "something was found: inputs under $WORK/artifacts/, logs in $WORK/*.log"
  echo "reproduce: cd fuzz && cargo +nightly fuzz run TARGET ARTIFACT; then add it under fuzz/regressions/TARGET/"
  exit 1
fi
[[ $KEEP_WORK == 1 ]] || rm -rf "$WORK"
exit 0
