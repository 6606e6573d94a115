#!/usr/bin/env bash
# The main job, end to end on this machine: build the host and the Echo plugin, start
# the local control plane (built from pinned upstream sources on first use), run
# `capstan run` with the Echo plugin, apply an Echo, and watch its Job and status
# reach Succeeded. The plane keeps running afterwards; `capstan dev down` stops it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if command -v rustup >/dev/null; then
  rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
fi
cargo build --release -p capstan
cargo build --profile plugin --target wasm32-wasip2 -p echo
capstan=target/release/capstan
plugins=$(mktemp -d)
cp target/wasm32-wasip2/plugin/echo.wasm "$plugins/"

echo "== offline: capstan test on a new Echo"
$capstan test "$plugins/echo.wasm" --parent plugins/echo/fixtures/echo.yaml

echo "== capstan dev up (the first run builds the control plane: ~10 min)"
env_line=$($capstan dev up | tail -n 1)
eval "$env_line"
source scripts/versions.env
kubectl=$(scripts/k8s-build.sh kube | tail -n 1)/k8s-$KUBERNETES_VERSION/bin/kubectl
$kubectl apply -f plugins/echo/crd.yaml
$kubectl wait --for condition=Established crd/echoes.capstan.dev --timeout 60s

echo "== capstan run --plugins $plugins (log: $plugins/host.log)"
$capstan run --plugins "$plugins" --metrics-addr 127.0.0.1:0 --health-addr 127.0.0.1:0 2>"$plugins/host.log" &
host=$!
trap 'kill $host 2>/dev/null; wait $host 2>/dev/null' EXIT

$kubectl apply -f plugins/echo/example.yaml
for _ in $(seq 1 120); do
  phase=$($kubectl get echo hello -n default -o jsonpath='{.status.phase}' 2>/dev/null || true)
  [ "$phase" = Succeeded ] && break
  sleep 0.5
done
$kubectl get echo,jobs,pods -n default
$kubectl get echo hello -n default -o jsonpath='{.status}{"\n"}'
job=$($kubectl get echo hello -n default -o jsonpath='{.status.jobName}')
$kubectl get events -n default --field-selector involvedObject.kind=Echo
[ "$phase" = Succeeded ] || { echo "demo: the Echo did not reach Succeeded; see $plugins/host.log" >&2; exit 1; }
echo "== Echo hello → Job $job → Succeeded"
echo "$env_line"
echo "(the plane keeps running; stop it with: $capstan dev down)"
