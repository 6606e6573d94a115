#!/usr/bin/env bash
# Metacontroller's own examples, each run by its own test.sh against Capstan on the local
# plane: the example's CRD applied, `capstan import metacontroller EXAMPLE --out P`,
# `capstan build` in P, `capstan run --config P/run.yaml`, then the example's test.sh with
# only its install and uninstall lines (`kubectl apply -k …`, `kubectl delete -k …`)
# removed. Prints one row per example: name, hook language, pass/fail, seconds. A
# directory of several controllers is imported as a workspace (one project each, one
# run.yaml for all).
#
#   tests/metacontroller-examples.sh METACONTROLLER_CHECKOUT [EXAMPLE…]
#
# The checkout is fetched by whoever runs this (its files are not part of this
# repository). The plane is started here (`capstan dev up`): with kwok's node, whose pods
# are ready at once, or with a real node (`--real-node`) for the examples that read their
# pods' output ($REAL_NODE, default: indexedjob). Needs `capstan` on PATH or in $CAPSTAN; the hooks' toolchains come from the registries through
# scripts/toolchain-*.sh. Logs and projects stay under $OUT (default: a
# temporary directory, printed).
set -uo pipefail

checkout=${1:?usage: $0 METACONTROLLER_CHECKOUT [EXAMPLE...]}
shift
examples=("$@")
if [ ${#examples[@]} -eq 0 ]; then
  examples=(bluegreen catset clusteredparent configmap-list-v2 configmappropagation crd-roles
    daemonjob globalconfigmap indexedjob namespace-list-v2 secretpropagation service-per-pod
    service-per-pod-v2 update-strategy)
fi
capstan=${CAPSTAN:-capstan}
# The hooks' toolchains, from the registries through this checkout's scripts.
scripts=$(dirname "$0")/../scripts
: "${COMPONENTIZE_PY:=$("$scripts/toolchain-python.sh")}"
: "${CAPSTAN_JS_TOOLCHAIN:=$("$scripts/toolchain-js.sh")}"
export COMPONENTIZE_PY CAPSTAN_JS_TOOLCHAIN
out=${OUT:-$(mktemp -d -t capstan-mc-XXXXXX)}
mkdir -p "$out"
per_test=${PER_TEST_SECONDS:-300}
: "${KUBECONFIG:=$HOME/.cache/capstan/dev/kubeconfig}"
export KUBECONFIG
echo "logs and projects under $out" >&2

# The language of an imported project's hooks, from what the importer says.
language() {
  sed -n 's/.*(\([A-Za-z]*\) hooks.*/\1/p' "$1" | head -n1
}

# The example's test.sh without the lines that install or remove the controller — and,
# in an example that waits for its hooks' Deployment (update-strategy), that wait: the
# hooks run in the plugin, and no Deployment is made.
strip_install() {
  grep -vE '^\s*kubectl (apply|delete) -k |^\s*kubectl rollout status deployment/|^\s*-n metacontroller --timeout=[0-9]+s$' "$1"
}

real_node=" ${REAL_NODE:-indexedjob} "
plane_mode=""
# The plane with a real node (`real`) or kwok's alone (`kwok`), restarted when it changes.
plane() {
  [ "$plane_mode" = "$1" ] && return
  "$capstan" dev down >/dev/null 2>&1
  if [ "$1" = real ]; then
    "$capstan" dev up --real-node >"$out/plane.log" 2>&1
  else
    "$capstan" dev up >"$out/plane.log" 2>&1
  fi || { echo "the plane did not start: $(tail -n1 "$out/plane.log")" >&2; exit 1; }
  plane_mode=$1
}

run_one() {
  local name=$1 dir=$out/$1 started rc=1 host_pid=""
  if [ ! -d "$checkout/examples/$name" ]; then
    # update-strategy came after v4.17.2.
    rows+=("| $name | - | not in this checkout | - |")
    return
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  cp -r "$checkout/examples/$name" "$dir/example"
  started=$(date +%s)
  if ! "$capstan" import metacontroller "$dir/example" --out "$dir/project" >"$dir/import.log" 2>&1; then
    echo "$name: import refused: $(tail -n1 "$dir/import.log")" >&2
    row "$name" "-" "fail (import)" "$started"
    return
  fi
  if ! (cd "$dir/project" && "$capstan" build) >"$dir/build.log" 2>&1; then
    echo "$name: build failed: $(tail -n1 "$dir/build.log")" >&2
    row "$name" "$(language "$dir/import.log")" "fail (build)" "$started"
    return
  fi
  kubectl apply -f "$dir/project/crds.yaml" >"$dir/crds.log" 2>&1 &&
    kubectl wait --for condition=established --timeout=60s -f "$dir/project/crds.yaml" >>"$dir/crds.log" 2>&1
  "$capstan" run --config "$dir/project/run.yaml" >"$dir/host.log" 2>&1 &
  host_pid=$!
  strip_install "$dir/example/test.sh" >"$dir/example/test-capstan.sh"
  (cd "$dir/example" && timeout "$per_test" bash test-capstan.sh) >"$dir/test.log" 2>&1
  rc=$?
  kill -TERM "$host_pid" 2>/dev/null && wait "$host_pid" 2>/dev/null
  kubectl delete --ignore-not-found --wait=false -f "$dir/project/crds.yaml" >>"$dir/crds.log" 2>&1
  if [ $rc -eq 0 ]; then
    row "$name" "$(language "$dir/import.log")" pass "$started"
  else
    echo "$name: test.sh exited $rc: $(tail -n1 "$dir/test.log")" >&2
    row "$name" "$(language "$dir/import.log")" "fail (test.sh $rc)" "$started"
  fi
}

rows=()
row() {
  rows+=("| $1 | $2 | $3 | $(($(date +%s) - $4)) |")
}

for e in "${examples[@]}"; do
  case "$real_node" in
    *" $e "*) plane real ;;
    *) plane kwok ;;
  esac
  run_one "$e"
done
echo "| example | language | result | seconds |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
