#!/usr/bin/env bash
# Runs every check the project gates on: formatting, clippy, all tests.
# Installs the few Debian packages the tests need when they are missing
# (only then, so a prepared machine is never touched), and refuses to run
# without a Rust toolchain rather than failing halfway.
set -euo pipefail

cd "$(dirname "$0")/.."

# Debian packages the test run relies on. The tests shell out to kill(1)
# (procps: they stop the processes they start by PID) and taskset(1)
# (util-linux: the benchmark smoke test pins the proxy and the generator);
# the dashboard tests drive a headless Chromium (chromium); the
# observability tests run a real Prometheus server and promtool (prometheus),
# the OpenMetrics parser of the Python client (python3-prometheus-client),
# GoAccess on a combined access log (goaccess) and rsyslogd receiving syslog
# (rsyslog); NGINX is the HTTP/2 server of one test of pools with
# `protocol = "h2"` (its GOAWAY after `keepalive_requests`); the rest serve the
# scripts and manual checks around them.
# Each entry is "package:command" (command empty when the package has none).
PACKAGES=(
  "procps:kill"
  "util-linux:taskset"
  "ca-certificates:"
  "curl:curl"
  "iproute2:ss"
  "chromium:chromium"
  "prometheus:promtool"
  "python3-prometheus-client:"
  "goaccess:goaccess"
  "rsyslog:rsyslogd"
  "keepalived:keepalived"
  "python3:python3"
  "nftables:nft"
  "nginx:nginx"
  # `switchyard bench` counts system calls with perf when it works, else strace.
  "strace:strace"
)

step() {
  printf '\n== %s\n' "$*"
}

have_package() {
  local pkg=$1 cmd=$2
  if [[ -n $cmd ]] && command -v "$cmd" >/dev/null 2>&1; then
    return 0
  fi
  dpkg -s "$pkg" >/dev/null 2>&1
}

install_missing_packages() {
  local missing=() entry pkg cmd
  for entry in "${PACKAGES[@]}"; do
    pkg=${entry%%:*}
    cmd=${entry#*:}
    have_package "$pkg" "$cmd" || missing+=("$pkg")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "all present: ${PACKAGES[*]%%:*}"
    return
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "warning: missing ${missing[*]} and no apt-get; continuing (the Rust tests do not need them)" >&2
    return
  fi
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      echo "warning: missing ${missing[*]}, not root and no sudo; continuing" >&2
      return
    fi
  fi
  echo "installing: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

ensure_cargo() {
  if command -v cargo >/dev/null 2>&1; then
    return
  fi
  if [[ -x "$HOME/.cargo/bin/cargo" ]]; then
    export PATH="$HOME/.cargo/bin:$PATH"
    return
  fi
  if command -v rustup >/dev/null 2>&1; then
    # rust-toolchain.toml names the channel and components; rustup reads it.
    local channel
    channel=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
    rustup toolchain install "$channel" --profile minimal --component rustfmt,clippy
    return
  fi
  echo "error: cargo not found. Install rustup (https://rustup.rs), then run this script again;" >&2
  echo "       rust-toolchain.toml pins the toolchain and rustup installs it on first use." >&2
  exit 1
}

# Implementations we did not write that the interop tests drive, installed into the
# git-ignored .tools/ only when missing: h2spec (HTTP/2 conformance, `go install`) and
# Pebble with pebble-challtestsrv (ACME, `go install`) into .tools/bin; Python grpcio
# (a real gRPC client and server) with the standard health servicer, the OpenTelemetry
# project's generated OTLP protobuf classes (opentelemetry-proto: the tracing tests'
# collector decodes with them) and aioquic (an HTTP/3 client, crates/cli/tests/e2e/http3.rs)
# into .tools/venv. Without Go or Python the tests needing them say they skipped.
TOOLS_DIR=.tools
H2SPEC_MODULE=github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible
# Let's Encrypt's ACME test server and its DNS server (the ACME tests, crates/cli/tests/e2e/acme.rs).
PEBBLE_VERSION=v2.10.3
PYTHON_PACKAGES=(grpcio==1.85.3 grpcio-health-checking==1.85.1 protobuf==7.36.2 opentelemetry-proto==1.45.2 aioquic==1.7.2)

install_h2spec() {
  if [[ -x $TOOLS_DIR/bin/h2spec ]]; then
    echo "h2spec present"
    return
  fi
  if ! command -v go >/dev/null 2>&1; then
    echo "warning: no Go toolchain: h2spec not installed, its test will say it skipped" >&2
    return
  fi
  echo "installing h2spec into $TOOLS_DIR/bin"
  GOBIN="$PWD/$TOOLS_DIR/bin" go install "$H2SPEC_MODULE" ||
    echo "warning: go install h2spec failed; its test will say it skipped" >&2
}

install_pebble() {
  if [[ -x $TOOLS_DIR/bin/pebble && -x $TOOLS_DIR/bin/pebble-challtestsrv ]]; then
    echo "pebble present"
    return
  fi
  if ! command -v go >/dev/null 2>&1; then
    echo "warning: no Go toolchain: pebble not installed, the ACME tests will say they skipped" >&2
    return
  fi
  echo "installing pebble and pebble-challtestsrv into $TOOLS_DIR/bin"
  GOBIN="$PWD/$TOOLS_DIR/bin" go install \
    "github.com/letsencrypt/pebble/v2/cmd/pebble@$PEBBLE_VERSION" \
    "github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@$PEBBLE_VERSION" ||
    echo "warning: go install pebble failed; the ACME tests will say they skipped" >&2
}

install_grpcio() {
  local venv=$TOOLS_DIR/venv
  if [[ -x $venv/bin/python ]] &&
    "$venv/bin/python" -c 'import grpc, grpc_health.v1, opentelemetry.proto.collector.trace.v1, aioquic.h3.connection' \
      2>/dev/null; then
    echo "grpcio, opentelemetry-proto and aioquic present"
    return
  fi
  if ! command -v python3 >/dev/null 2>&1; then
    echo "warning: no python3: grpcio not installed, the gRPC tests will say they skipped" >&2
    return
  fi
  echo "installing ${PYTHON_PACKAGES[*]} into $venv"
  if ! python3 -m venv --clear "$venv" 2>/dev/null; then
    # Debian's python3 keeps venv (and its pip) in a package of its own.
    PACKAGES+=("python3-venv:")
    install_missing_packages
    python3 -m venv --clear "$venv" || { echo "warning: cannot make a venv; gRPC tests will skip" >&2; return; }
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${PYTHON_PACKAGES[@]}" ||
    echo "warning: pip install failed; the gRPC tests will say they skipped" >&2
}

# Jaeger (v2 all-in-one, on the OpenTelemetry Collector), the real trace receiver of
# crates/cli/tests/e2e/tracing_jaeger.rs. Building it took 12.4 minutes on this project's 2-core
# machine (84 s of module downloads, the rest compiling), too much for every CI run: it is
# built into .tools/bin only with SWITCHYARD_JAEGER=1; without it that one test says it
# skipped (the OTLP decoding itself is always checked by tests/otel/collector.py).
JAEGER_MODULE=github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0

install_jaeger() {
  if [[ -x $TOOLS_DIR/bin/jaeger ]]; then
    echo "jaeger present"
    return
  fi
  if [[ ${SWITCHYARD_JAEGER:-0} != 1 ]]; then
    echo "jaeger not built (SWITCHYARD_JAEGER=1 builds it, about 12 minutes): its test will say it skipped"
    return
  fi
  if ! command -v go >/dev/null 2>&1; then
    echo "warning: no Go toolchain: jaeger not built, its test will say it skipped" >&2
    return
  fi
  # Jaeger's go.mod has replace directives, so `go install pkg@version` refuses it: it is
  # built as a tool dependency of a throw-away module instead.
  local work
  work=$(mktemp -d)
  mkdir -p "$TOOLS_DIR/bin"
  echo "building jaeger into $TOOLS_DIR/bin"
  if (cd "$work" && go mod init jaeger-build >/dev/null 2>&1 && go get -tool "$JAEGER_MODULE" &&
      go build -o "$OLDPWD/$TOOLS_DIR/bin/jaeger" "${JAEGER_MODULE%@*}"); then
    echo "jaeger built"
  else
    echo "warning: building jaeger failed; its test will say it skipped" >&2
  fi
  rm -rf "$work"
}

export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

step "system packages"
install_missing_packages

step "interop tools (.tools/)"
install_h2spec
install_pebble
install_grpcio
install_jaeger

step "toolchain"
ensure_cargo
cargo --version
rustc --version

step "cargo fmt --all -- --check"
cargo fmt --all -- --check

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo test --workspace"
cargo test --workspace

step "all checks passed"
