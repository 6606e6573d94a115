#!/usr/bin/env bash
# The test suite, as CI runs it: installs what it needs (the wasm32-wasip2 target, the
# pinned control-plane binaries, built from Go modules into ~/.cache/capstan once),
# then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if command -v rustup >/dev/null; then
  rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
fi
scripts/k8s-build.sh all >/dev/null
cargo build --profile plugin --target wasm32-wasip2 -p echo -p hostile
cargo test --workspace
