#!/usr/bin/env bash
# The main job, end to end on this machine: build the host and the Echo plugin, start
# the local control plane (built from pinned upstream sources on first use) with a real
# node where the machine allows it, run `capstan run` with the Echo plugin, apply an Echo,
# and watch its Job's pod print the message. Then, on the real node, build Capstan's image
# offline, install the Helm chart with it, and watch the in-cluster host reconcile a new
# Echo. The plane keeps running afterwards; `capstan dev down` stops it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if command -v rustup >/dev/null; then
  rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
fi
# A real node needs root, Linux and Debian's runtime packages; without them Jobs run on
# kwok's fake node, and one line says why.
can_real_node=false
[ "$(uname -s)" = Linux ] && [ "$(id -u)" = 0 ] && can_real_node=true
# On a fresh machine the plane's Go build (~13 min on 2 cores) and the host's Rust build
# (~8) come first; side by side each fills the cores the other leaves idle in its serial
# stretches (linking kube-apiserver, the host's last crates).
plane_parts=(all helm)
[ "$can_real_node" = true ] && plane_parts=(all node helm)
plane_log=$(mktemp)
# In a session of its own, so a demo that stops early takes the whole Go build with it.
setsid scripts/k8s-build.sh "${plane_parts[@]}" >"$plane_log" 2>&1 &
plane_build=$!
trap 'kill -- "-$plane_build" 2>/dev/null || true' EXIT
# The dev profile: it builds in minutes, and a newcomer's `scripts/test.sh` reuses it. The
# release profile's whole-program LTO is for the Dockerfile's image and the benches.
cargo build -p capstan
cargo build --profile plugin --target wasm32-wasip2 -p echo
capstan=target/debug/capstan
plugins=$(mktemp -d)
cp target/wasm32-wasip2/plugin/echo.wasm "$plugins/"

echo "== offline: capstan test on a new Echo"
$capstan test "$plugins/echo.wasm" --parent plugins/echo/fixtures/echo.yaml

echo "== the control plane's binaries (built from pinned Go modules on the first run)"
wait "$plane_build" || { cat "$plane_log" >&2; echo "demo: building the control plane failed" >&2; exit 1; }
real_node=false
if [ "$can_real_node" = true ]; then
  scripts/node-packages.sh
  echo "== capstan dev up --real-node"
  if env_line=$($capstan dev up --real-node 2>"$plugins/up.log" | tail -n 1); then
    real_node=true
  else
    echo "demo: no real node here ($(head -n 1 "$plugins/up.log")); Jobs run on kwok's fake node"
  fi
else
  echo "demo: no real node here (it needs root on Linux); Jobs run on kwok's fake node"
fi
if [ "$real_node" = false ]; then
  echo "== capstan dev up"
  env_line=$($capstan dev up | tail -n 1)
fi
eval "$env_line"
source scripts/versions.env
cache=$(scripts/k8s-build.sh kube helm | tail -n 1)
kubectl=$cache/k8s-$KUBERNETES_VERSION/bin/kubectl
helm=$cache/helm-$HELM_VERSION/bin/helm
$kubectl apply -f plugins/echo/crd.yaml
$kubectl wait --for condition=Established crd/echoes.capstan.dev --timeout 60s

echo "== capstan run --plugins $plugins (log: $plugins/host.log)"
$capstan run --plugins "$plugins" --metrics-addr 127.0.0.1:0 --health-addr 127.0.0.1:0 2>"$plugins/host.log" &
host=$!
trap 'status=$?; kill $host 2>/dev/null || true; wait $host 2>/dev/null || true; exit $status' EXIT

# Waits for Echo $1 to reach Succeeded and shows what its Job's pod printed.
echo_succeeds() {
  local phase=""
  for _ in $(seq 1 240); do
    phase=$($kubectl get echo "$1" -n default -o jsonpath='{.status.phase}' 2>/dev/null || true)
    [ "$phase" = Succeeded ] && break
    sleep 0.5
  done
  $kubectl get echo,jobs,pods -n default
  [ "$phase" = Succeeded ] || { echo "demo: Echo $1 did not reach Succeeded; see $2" >&2; exit 1; }
  local job
  job=$($kubectl get echo "$1" -n default -o jsonpath='{.status.jobName}')
  if [ "$real_node" = true ]; then
    echo "== kubectl logs job/$job (the container really ran on node capstan-node):"
    $kubectl logs -n default "job/$job"
  fi
  echo "== Echo $1 → Job $job → Succeeded"
}

$kubectl apply -f plugins/echo/example.yaml
echo_succeeds hello "$plugins/host.log"
$kubectl get events -n default --field-selector involvedObject.kind=Echo

if [ "$real_node" = true ]; then
  # The host leaves; from now on the one in the cluster reconciles.
  kill $host; wait $host 2>/dev/null || true
  echo "== capstan dev image: Capstan's image, built offline and loaded into the node"
  $capstan dev image --profile dev
  echo "== helm install capstan charts/capstan (the image from the node, never pulled)"
  $helm upgrade --install capstan charts/capstan -n capstan-system --create-namespace \
    -f charts/capstan/ci/single-values.yaml --set-file plugins.echo.source.wasm="$plugins/echo.wasm" \
    --set image.pullPolicy=Never --set metrics.serviceMonitor.enabled=false --wait --timeout 120s >/dev/null
  $kubectl get pods -n capstan-system -o wide
  $kubectl apply -f - <<'YAML'
apiVersion: capstan.dev/v1alpha1
kind: Echo
metadata:
  name: hello-in-cluster
  namespace: default
spec:
  message: Hello from Capstan running in the cluster
YAML
  echo_succeeds hello-in-cluster "kubectl logs -n capstan-system deploy/capstan"
  echo "== kubectl logs -n capstan-system deploy/capstan"
  $kubectl logs -n capstan-system deploy/capstan | tail -n 8
fi
echo "$env_line"
echo "(the plane keeps running; stop it with: $capstan dev down)"
