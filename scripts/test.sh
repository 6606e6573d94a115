#!/usr/bin/env bash
# The test suite, as CI runs it: installs what it needs (the wasm32-wasip2 target, the
# real node's Debian packages and Prometheus, the pinned control-plane and node binaries
# and helm, built from Go modules into ~/.cache/capstan once, the Python/JS toolchains and
# mdbook), then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if command -v rustup >/dev/null; then
  rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
fi
# The real node's runtime for tests/node*.rs (Debian's packages; as root, which the node
# needs anyway), then the control plane, the node's kubelet, kube-proxy and pause, and helm
# for the chart tests, and the CNCF Distribution registry the registry tests push to.
scripts/node-packages.sh
scripts/k8s-build.sh all node helm registry >/dev/null
# The Python and JavaScript plugins' toolchains (componentize-py from PyPI, componentize-js
# and jco from npm) into ~/.cache/capstan, keyed by version; the tests find them there.
scripts/toolchain-python.sh >/dev/null
scripts/toolchain-js.sh >/dev/null
# mdbook for the book in docs/ (crates.io, cached the same way); tests/reference.rs builds it.
scripts/toolchain-mdbook.sh >/dev/null
cargo build --profile plugin --target wasm32-wasip2 -p echo -p hostile -p scheduled-echo -p tenant -p broken-metadata -p greedy -p echo-canary -p hostile-twin -p namespace-defaults -p misdeclared -p misdeclared-orphans -p echo-rogue

# cargo prints one result line per test binary; finish with the total on one line.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace 2>&1 | tee "$log" || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed;?$/) p += $(i-1); if ($(i) ~ /^failed;?$/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
