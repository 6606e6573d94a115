#!/usr/bin/env bash
# Builds the pinned control-plane binaries (and helm) from Go modules into a cache keyed
# by version, once. Prebuilt release downloads are not reachable here; the Go module
# proxy is. `node` adds what a real node needs from the same Kubernetes module: kubelet,
# kube-proxy, and the pause container compiled from the module's pause.c.
# Usage: scripts/k8s-build.sh [all|kube|node|etcd|kwok|helm|registry]...
# Prints the cache root on its last line.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${CAPSTAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capstan}
kube_dir=$cache/k8s-$KUBERNETES_VERSION
etcd_dir=$cache/etcd-$ETCD_VERSION
kwok_dir=$cache/kwok-$KWOK_VERSION
helm_dir=$cache/helm-$HELM_VERSION
registry_dir=$cache/registry-$REGISTRY_VERSION

die() { echo "k8s-build: $*" >&2; exit 1; }
step() { echo "==> $*" >&2; }

command -v go >/dev/null || die "Go is not installed (need go >= 1.24 on PATH to build the control plane)"
export GOFLAGS=${GOFLAGS:-} GOTOOLCHAIN=${GOTOOLCHAIN:-auto}

# A wrapper module is needed because k8s.io/kubernetes replaces its staging modules with
# ./staging paths, which `go install pkg@version` refuses.
plane_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
node_bins=(kubelet kube-proxy)

build_kube() {
  local bins=("$@")
  local missing=()
  for b in "${bins[@]}"; do [ -x "$kube_dir/bin/$b" ] || missing+=("$b"); done
  [ ${#missing[@]} -eq 0 ] && { step "kubernetes $KUBERNETES_VERSION: cached"; return; }
  local mod=$kube_dir/src
  mkdir -p "$mod" "$kube_dir/bin"
  local minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  local staging=v0.${KUBERNETES_VERSION#v1.}
  # The module list covers every command ever built here, so adding the node's commands
  # to a cache built for the plane only re-resolves the modules once.
  local want_tools
  want_tools=$(printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "${plane_bins[@]}" "${node_bins[@]}")
  if [ -f "$mod/tools.go" ] && ! grep -q 'cmd/kubelet"' "$mod/tools.go"; then
    rm -f "$mod/go.sum"
  fi
  if [ ! -f "$mod/go.sum" ]; then
    step "kubernetes $KUBERNETES_VERSION: resolving modules"
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
    [ -f "$gomod" ] || die "could not fetch k8s.io/kubernetes@$KUBERNETES_VERSION from the Go module proxy ($(go env GOPROXY))"
    {
      echo "module capstan.dev/k8sbuild"
      echo
      echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$gomod")"
      echo
      echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
      echo
      grep -E '^\s*k8s\.io/[^ ]+ => \./staging/' "$gomod" | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
    } >"$mod/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport (\n%s\n)\n' "$want_tools" >"$mod/tools.go"
    (cd "$mod" && go mod tidy -e >/dev/null 2>&1 || go mod tidy) || die "go mod tidy failed in $mod"
  fi
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  # One `go build` for every missing binary: the go command then links one binary while it
  # compiles another's packages, where one build after the other left a core idle through
  # each link (six, of 20-40 s each, on a fresh machine's demo).
  step "kubernetes $KUBERNETES_VERSION: building ${missing[*]}"
  local t0=$SECONDS out=$kube_dir/bin/.building
  rm -rf "$out" && mkdir -p "$out"
  (cd "$mod" && go build -tags tools -trimpath -ldflags "$ld" -o "$out/" "${missing[@]/#/k8s.io/kubernetes/cmd/}") \
    || die "building ${missing[*]} failed"
  for b in "${missing[@]}"; do mv "$out/$b" "$kube_dir/bin/$b"; done
  rmdir "$out"
  step "kubernetes $KUBERNETES_VERSION: ${missing[*]} built in $((SECONDS - t0)) s"
}

# The pause container's one program, from the same module: a static binary that sleeps
# until signalled (what registry.k8s.io/pause ships).
build_pause() {
  [ -x "$kube_dir/bin/pause" ] && { step "pause $KUBERNETES_VERSION: cached"; return; }
  command -v gcc >/dev/null || die "gcc is not installed (needed to build the pause container: apt-get install gcc libc6-dev)"
  local src
  src=$(cd "$kube_dir/src" && go list -m -f '{{.Dir}}' k8s.io/kubernetes) || die "k8s.io/kubernetes is not in $kube_dir/src"
  step "pause $KUBERNETES_VERSION: building"
  gcc -Os -static -DVERSION="$KUBERNETES_VERSION" -o "$kube_dir/bin/pause.tmp" "$src/build/pause/linux/pause.c" \
    || die "building pause failed (a static build needs libc6-dev)"
  strip "$kube_dir/bin/pause.tmp" 2>/dev/null || true
  mv "$kube_dir/bin/pause.tmp" "$kube_dir/bin/pause"
}

build_etcd() {
  [ -x "$etcd_dir/bin/etcd" ] && { step "etcd $ETCD_VERSION: cached"; return; }
  local mod=$etcd_dir/src
  mkdir -p "$mod" "$etcd_dir/bin"
  step "etcd $ETCD_VERSION: building"
  cat >"$mod/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$mod" && { [ -f go.mod ] || go mod init capstan.dev/etcdbuild >/dev/null 2>&1; } \
    && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 && go mod tidy >/dev/null 2>&1 \
    && go build -trimpath -ldflags "-s -w" -o "$etcd_dir/bin/etcd.tmp" .) || die "building etcd failed"
  mv "$etcd_dir/bin/etcd.tmp" "$etcd_dir/bin/etcd"
}

build_kwok() {
  if [ ! -x "$kwok_dir/bin/kwok" ]; then
    step "kwok $KWOK_VERSION: building"
    mkdir -p "$kwok_dir/bin"
    GOBIN="$kwok_dir/bin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" || die "building kwok failed"
  else
    step "kwok $KWOK_VERSION: cached"
  fi
  if [ ! -f "$kwok_dir/stages/pod-complete.yaml" ]; then
    local src
    src=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)",*/\1/p')
    mkdir -p "$kwok_dir/stages"
    local s
    for s in node/fast/node-initialize node/heartbeat/node-heartbeat pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
      cp "$src/kustomize/stage/$s.yaml" "$kwok_dir/stages/$(basename "$s").yaml" || die "kwok stage $s missing in module"
    done
    chmod u+w "$kwok_dir/stages"/*.yaml
  fi
}

# `go install` alone leaves helm reporting "v3.21" and assuming Kubernetes v1.20 for
# `helm template`/`helm lint`; set what helm's Makefile sets: its version and the
# Kubernetes minor of the client-go it is built with.
build_helm() {
  if [ -x "$helm_dir/bin/helm" ] && [ "$("$helm_dir/bin/helm" version --template '{{.Version}}')" = "$HELM_VERSION" ]; then
    step "helm $HELM_VERSION: cached"; return
  fi
  step "helm $HELM_VERSION: building"
  local t0=$SECONDS gomod minor
  gomod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
  [ -f "$gomod" ] || die "could not fetch helm.sh/helm/v3@$HELM_VERSION from the Go module proxy ($(go env GOPROXY))"
  minor=$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod")
  [ -n "$minor" ] || die "no k8s.io/client-go requirement in $gomod"
  local ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  local pkg
  for pkg in pkg/lint/rules pkg/chartutil; do
    ld="$ld -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$minor"
  done
  mkdir -p "$helm_dir/bin"
  GOBIN="$helm_dir/bin" CGO_ENABLED=0 go install -trimpath -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
    || die "building helm failed"
  step "helm $HELM_VERSION: built in $((SECONDS - t0)) s"
}

# The CNCF Distribution registry: the real node's image mirror (`imagePullPolicy: Always`
# pulls of its images, offline), and the tests that push and pull plugins as OCI artifacts.
build_registry() {
  [ -x "$registry_dir/bin/registry" ] && { step "registry $REGISTRY_VERSION: cached"; return; }
  step "registry $REGISTRY_VERSION: building"
  mkdir -p "$registry_dir/bin"
  GOBIN="$registry_dir/bin" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
    "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION" || die "building the registry failed"
}

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(all)
# Every Kubernetes binary the targets want, built together the first time one is wanted.
kube_bins=()
for t in "${targets[@]}"; do
  case $t in
    all | kube) kube_bins+=("${plane_bins[@]}") ;;
    node) kube_bins+=("${node_bins[@]}") ;;
  esac
done
kube() { [ ${#kube_bins[@]} -eq 0 ] || build_kube "${kube_bins[@]}"; kube_bins=(); }
for t in "${targets[@]}"; do
  case $t in
    all) build_etcd; build_kwok; kube ;;
    kube) kube ;;
    node) kube; build_pause; build_registry ;;
    etcd) build_etcd ;;
    kwok) build_kwok ;;
    helm) build_helm ;;
    registry) build_registry ;;
    *) die "unknown target '$t' (all|kube|node|etcd|kwok|helm|registry)" ;;
  esac
done
echo "$cache"
