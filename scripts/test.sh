#!/usr/bin/env bash
# The test suite, as CI runs it: installs what it needs (the wasm32-wasip2 target, the
# real node's Debian packages and Prometheus, the pinned control-plane and node binaries
# and helm, built from Go modules into ~/.cache/capstan once, the Python/JS toolchains and
# mdbook), then runs every test in the workspace.
#
# `scripts/test.sh --busy-core` runs the same suite with one core kept busy the whole time
# by a spinning process of the script's own (pinned to the last core where taskset is
# there): the suite must pass on a loaded machine too, not only on a quiet one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-}" in
  --busy-core)
    pin=()
    command -v taskset >/dev/null && pin=(taskset -c "$(($(nproc) - 1))")
    "${pin[@]}" bash -c 'while :; do :; done' &
    busy=$!
    trap 'kill "$busy" 2>/dev/null || true' EXIT
    echo "test.sh: one core kept busy by pid $busy" >&2
    ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--busy-core]" >&2; exit 2 ;;
esac

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
# mdbook for the book in docs/ (crates.io, cached the same way); tests/offline/reference.rs builds it.
scripts/toolchain-mdbook.sh >/dev/null
cargo build --profile plugin --target wasm32-wasip2 -p echo -p hostile -p scheduled-echo -p tenant -p broken-metadata -p greedy -p echo-canary -p hostile-twin -p namespace-defaults -p misdeclared -p misdeclared-orphans -p echo-rogue

# Build every test once, then run them two jobs at a time (CAPSTAN_TEST_JOBS): integration
# tests spend part of their time waiting on a local control plane (leases, pauses, pods
# starting), so on a 2-core machine two at once took 26 minutes where one at a time took
# 35. Three at once kept the cores 98% busy and made each job slower (node 639 -> 1157 s,
# new 394 -> 767 s): the jobs took 1911 s where two at once took 1978, too little to be
# worth the longer jobs' timeouts. A job is one
# module of an area's test binary (`cargo test --test cluster -- --exact faults::…`), or a
# whole target where it has no modules. Jobs start longest first (the names below, from a
# CI run's timings), each one's output printed whole as it ends.
cargo test --workspace --no-run
# The `capstan` binary the cluster tests start, with the features the tests resolve (as
# `capstan_bin()` builds it): only the binary is linked, every crate is the tests' own.
cargo build --workspace --tests --bin capstan
echo "test.sh: every test built at $SECONDS s" >&2
jobs=$(mktemp -d)
trap 'rm -rf "$jobs"; [ -z "${busy:-}" ] || kill "$busy" 2>/dev/null || true' EXIT
longest_first="faults writes node new admission sharding hostile polyglot run ha budgets signing tutorial plane"
# One real node per machine: the targets that start one run in one job, one after the other.
one_after_the_other="node node_down"
# Every job names its target but selects the whole workspace, so each resolves the same
# features as the build above and reuses it.
targets=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
names = {t["name"] for p in json.load(sys.stdin)["packages"] for t in p["targets"] if "test" in t["kind"]}
print(" ".join(sorted(names)))')
for name in $one_after_the_other; do
  case " $targets " in *" $name "*) ;; *) echo "test.sh: no test target $name in the workspace" >&2; exit 1 ;; esac
done
# Each job as "NAME<TAB>cargo test's arguments".
for target in $targets; do
  case " $one_after_the_other " in *" $target "*) continue ;; esac
  cargo test --quiet --workspace --test "$target" -- --list --format terse |
    sed -n 's/: test$//p' | python3 -c '
import sys
target = sys.argv[1]
modules = {}
for name in sys.stdin.read().split():
    module = name.split("::")[0] if "::" in name else ""
    modules.setdefault(module, []).append(name)
for module, names in sorted(modules.items()):
    if module:
        print(f"{module}\t--workspace --test {target} -- --exact", *names)
    else:
        print(f"{target}\t--workspace --test {target}")' "$target"
done >"$jobs/found"
echo "${one_after_the_other%% *}	--workspace$(printf ' --test %s' $one_after_the_other)" >>"$jobs/found"
for name in $longest_first; do
  grep -q "^$name	" "$jobs/found" || { echo "test.sh: no test module or target $name in the workspace" >&2; exit 1; }
done
{
  for name in $longest_first; do grep "^$name	" "$jobs/found"; done
  cat "$jobs/found"
  printf 'unit\t--workspace --lib --bins\n'
  printf 'doc\t--workspace --doc\n'
} | awk '!seen[$0]++' >"$jobs/list"

run_job() {
  local name=${1%%	*} args=${1#*	} log
  log=$(mktemp "$jobs/log.XXXXXX")
  local start=$SECONDS status=0
  # shellcheck disable=SC2086 # the job is cargo's arguments, split on spaces
  cargo test $args >"$log" 2>&1 || status=$?
  # The CPU its processes took (those it waited for: planes, hosts, builds): on a machine
  # whose cores are all busy, what a job costs the others is its CPU, not its time.
  # (`times` in this shell, not in a command substitution's subshell, which has waited for none.)
  local cpu
  times >"$log.times"
  cpu=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.0f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$log.times")
  echo "$name" >"$log.job"
  echo "$status" >"$log.status"
  { cat "$log"; echo "test.sh: $name: exit $status in $((SECONDS - start)) s, CPU ${cpu} s"; } | flock "$jobs/list" cat
}
export -f run_job
export jobs
# The cores' busy share over the jobs, printed with the totals: whether more jobs at once
# could still help (idle cores) or only slow each one down (all busy).
cpu_ticks() { [ -r /proc/stat ] && awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
ticks_before=$(cpu_ticks || true)
xargs -a "$jobs/list" -d '\n' -P "${CAPSTAN_TEST_JOBS:-2}" -I{} bash -c 'run_job "$1"' _ {}

# One line for the whole run: the sum of cargo's result lines, and the jobs that failed.
cat "$jobs"/log.?????? | awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed;?$/) p += $(i-1); if ($(i) ~ /^failed;?$/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed", p, f }'
busy_share=""
if [ -n "$ticks_before" ]; then
  busy_share=$(echo "$ticks_before $(cpu_ticks)" | awk '{ printf ", cores %d%% busy while jobs ran", 100 * ($3 - $1) / ($4 - $2) }')
fi
echo " in $SECONDS s$busy_share${busy:+, one core kept busy}"
status=0
for s in "$jobs"/log.*.status; do
  if [ "$(cat "$s")" != 0 ]; then
    status=1
    echo "test.sh: failed: $(cat "${s%.status}.job")" >&2
  fi
done
exit "$status"
