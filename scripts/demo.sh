#!/usr/bin/env bash
# The main job, end to end on this machine: build the host and the Echo plugin, run the
# plugin offline in the sandbox, and bring up the local control plane with the Echo CRD.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if command -v rustup >/dev/null; then
  rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
fi
cargo build --release -p capstan
cargo build --profile plugin --target wasm32-wasip2 -p echo
capstan=target/release/capstan
echo_wasm=target/wasm32-wasip2/plugin/echo.wasm

echo "== capstan inspect $echo_wasm"
$capstan inspect "$echo_wasm"
echo "== capstan test: a new Echo"
$capstan test "$echo_wasm" --parent plugins/echo/fixtures/echo.yaml
echo "== capstan test: its Job succeeded"
$capstan test "$echo_wasm" --parent plugins/echo/fixtures/echo-running.yaml --children plugins/echo/fixtures/job-succeeded.yaml

echo "== capstan dev up (builds the control plane on first use, ~10 min)"
env_line=$($capstan dev up | tail -n 1)
eval "$env_line"
source scripts/versions.env
kubectl=$(scripts/k8s-build.sh kube | tail -n 1)/k8s-$KUBERNETES_VERSION/bin/kubectl
$kubectl apply -f plugins/echo/crd.yaml
$kubectl wait --for condition=Established crd/echoes.capstan.dev --timeout 60s
$kubectl get nodes
echo "$env_line"
echo "(stop it with: $capstan dev down)"
