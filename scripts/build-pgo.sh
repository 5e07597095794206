#!/usr/bin/env bash
# build-pgo.sh: the shipped build, optimised with a profile of switchyard's own traffic.
#
# Profile-guided optimisation (PGO) in three steps, each in its own target folder so that the
# everyday builds are not touched:
#   1. an instrumented build (`-Cprofile-generate`) of the `dist` profile;
#   2. a training run: that build runs `switchyard bench --quick` on itself — HTTP/1.1
#      keep-alive and one request per connection, the access log, h2c, HTTP/2 towards the
#      servers, HTTP/2 over TLS, HTTP/3, idle layer-4 and layer-7 connections — so the
#      counts come from the proxy, the origins and the generator of the suite's shapes;
#   3. the `dist` build again, with the merged counts (`-Cprofile-use`): hot paths laid out
#      together and branches arranged for the common case.
#
# The result is `target/pgo/dist/switchyard`. It behaves exactly as the other builds (the
# profile changes code layout and inlining, not what the code does); `./scripts/test.sh`
# does not use it. About 25 minutes on 2 cores (two fat-LTO builds and a 2-minute run).
# llvm-profdata comes from rustup's `llvm-tools` component, added here when missing.
#
# Usage: scripts/build-pgo.sh            (environment: PGO_DIR, default target/pgo)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PGO_DIR=${PGO_DIR:-$ROOT/target/pgo}
PROFILE=dist

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
if [[ ! -x $profdata ]]; then
    rustup component add llvm-tools
fi
[[ -x $profdata ]] || { echo "llvm-profdata not found at $profdata" >&2; exit 2; }

rm -rf "$PGO_DIR/raw" "$PGO_DIR/train"
mkdir -p "$PGO_DIR/raw"

echo "build-pgo: 1/3 instrumented build" >&2
RUSTFLAGS="-Cprofile-generate=$PGO_DIR/raw" \
    cargo build --profile "$PROFILE" -p switchyard --target-dir "$PGO_DIR/generate"

echo "build-pgo: 2/3 training run (switchyard bench --quick)" >&2
"$PGO_DIR/generate/$PROFILE/switchyard" bench --quick --out "$PGO_DIR/train" >&2
"$profdata" merge -o "$PGO_DIR/merged.profdata" "$PGO_DIR"/raw/*.profraw

echo "build-pgo: 3/3 optimised build" >&2
RUSTFLAGS="-Cprofile-use=$PGO_DIR/merged.profdata" \
    cargo build --profile "$PROFILE" -p switchyard --target-dir "$PGO_DIR"
echo "build-pgo: $PGO_DIR/$PROFILE/switchyard" >&2
