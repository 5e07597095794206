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
# the dashboard tests drive a headless Chromium (chromium); the rest serve
# the scripts and manual checks around them.
# Each entry is "package:command" (command empty when the package has none).
PACKAGES=(
  "procps:kill"
  "util-linux:taskset"
  "ca-certificates:"
  "curl:curl"
  "iproute2:ss"
  "chromium:chromium"
  "keepalived:keepalived"
  "python3:python3"
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

export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

step "system packages"
install_missing_packages

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
