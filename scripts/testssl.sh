#!/usr/bin/env bash
# testssl.sh: Debian's testssl.sh against switchyard's default `https` listener.
#
# On-demand check, not part of the test suite (it takes a few minutes). It generates
# a self-signed RSA-2048 certificate for `localhost`, runs one origin simulator and
# switchyard with an `https` service that sets only `certificate` and `key` (every
# other TLS setting at its default), then runs testssl.sh's protocol, cipher,
# forward-secrecy, server-defaults and vulnerability checks against it.
#
# Environment (all optional):
#   PORT=18443            the https listener (the origin uses PORT+1)
#   SWITCHYARD_BIN        use this binary instead of `cargo build --release -p switchyard`
#   OUT                   output directory (default bench-out/testssl-<timestamp>)
#
# Output: OUT/testssl.txt (the full report, also printed), OUT/testssl.json, OUT/summary.txt.
# Exit status 1 when testssl.sh flags a weak protocol, a weak cipher or a vulnerability.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PORT=${PORT:-18443}
ORIGIN_PORT=$((PORT + 1))
OUT=${OUT:-$ROOT/bench-out/testssl-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"

for tool in testssl openssl curl; do
  command -v "$tool" >/dev/null || { echo "testssl.sh: $tool is missing (apt-get install testssl.sh openssl curl)" >&2; exit 2; }
done

if [[ -n ${SWITCHYARD_BIN:-} ]]; then
  BIN=$SWITCHYARD_BIN
else
  (cd "$ROOT" && cargo build --release -q -p switchyard)
  BIN=$ROOT/target/release/switchyard
fi

pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT

openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost -keyout "$OUT/key.pem" -out "$OUT/cert.pem" 2>/dev/null

cat >"$OUT/switchyard.toml" <<EOF
workers = 1

[[service]]
name = "tls"
mode = "https"
listen = "127.0.0.1:$PORT"
pool = "web"
tls = { certificate = "cert.pem", key = "key.pem" }

[[pool]]
name = "web"
servers = [{ address = "127.0.0.1:$ORIGIN_PORT" }]
EOF

"$BIN" check --config "$OUT/switchyard.toml"
"$BIN" origin --listen "127.0.0.1:$ORIGIN_PORT" --name origin >"$OUT/origin.log" 2>&1 &
pids+=($!)
"$BIN" run --config "$OUT/switchyard.toml" >"$OUT/switchyard.log" 2>&1 &
pids+=($!)

for _ in $(seq 1 100); do
  curl -sk -o /dev/null "https://localhost:$PORT/" --resolve "localhost:$PORT:127.0.0.1" && break
  sleep 0.1
done
curl -sk -o /dev/null --fail "https://localhost:$PORT/" --resolve "localhost:$PORT:127.0.0.1" ||
  { echo "testssl.sh: switchyard does not answer on https://127.0.0.1:$PORT (see $OUT/switchyard.log)" >&2; exit 1; }

# -p protocols, -s standard cipher categories, -f forward secrecy, -S server defaults,
# -U vulnerabilities. testssl's exit status counts findings of every severity, so the
# verdict below reads the JSON instead.
testssl --quiet --color 0 --warnings off --nodns none --ip 127.0.0.1 \
  -p -s -f -S -U --jsonfile "$OUT/testssl.json" "localhost:$PORT" | tee "$OUT/testssl.txt" || true

# Findings testssl.sh rates MEDIUM or worse (weak protocol or cipher, vulnerability).
# The self-signed certificate's own findings (trust chain, no OCSP/CT) are expected here
# and listed apart.
python3 - "$OUT/testssl.json" "$OUT/summary.txt" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
cert_ids = ("cert_", "OCSP", "DNS_CAA", "intermediate", "certificate", "chain_of_trust")
bad, cert = [], []
for r in rows:
    sev = r.get("severity", "")
    if sev not in ("MEDIUM", "HIGH", "CRITICAL"):
        continue
    line = f"{sev:8} {r.get('id')}: {r.get('finding')}"
    (cert if r.get("id", "").startswith(cert_ids) else bad).append(line)
with open(sys.argv[2], "w") as f:
    f.write(f"findings MEDIUM or worse (protocols, ciphers, vulnerabilities): {len(bad)}\n")
    f.writelines(l + "\n" for l in bad)
    f.write(f"certificate findings (self-signed test certificate, expected): {len(cert)}\n")
    f.writelines(l + "\n" for l in cert)
print(open(sys.argv[2]).read())
sys.exit(1 if bad else 0)
PY
