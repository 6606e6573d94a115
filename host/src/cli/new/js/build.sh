#!/usr/bin/env sh
# Builds build/{{name}}.wasm (what `capstan build` runs): bundles src/component.js with
# @capstan/sdk into one ES module (rolldown), then makes a component of the WIT world
# `reconciler` with componentize-js, every WASI feature of its engine disabled, so the
# component imports only capstan:reconciler/host.
#
#   toolchain  CAPSTAN_JS_TOOLCHAIN, a directory holding componentize-js and rolldown
#              (Capstan's scripts/toolchain-js.sh prints one); else PATH.
#   WIT        CAPSTAN_WIT, a wit/ directory; else the one @capstan/sdk ships.
set -eu
cd "$(dirname "$0")"

if [ -n "${CAPSTAN_JS_TOOLCHAIN:-}" ]; then
  PATH="$CAPSTAN_JS_TOOLCHAIN:$PATH"
fi
for tool in componentize-js rolldown; do
  command -v "$tool" >/dev/null || {
    echo "build.sh: $tool not found: set CAPSTAN_JS_TOOLCHAIN or put it on PATH" >&2
    exit 1
  }
done
[ -f node_modules/@capstan/sdk/package.json ] || {
  echo "build.sh: no @capstan/sdk in node_modules: run npm install first" >&2
  exit 1
}
wit="${CAPSTAN_WIT:-node_modules/@capstan/sdk/wit}"
[ -f "$wit/reconciler.wit" ] || { echo "build.sh: no reconciler.wit in $wit: set CAPSTAN_WIT" >&2; exit 1; }

mkdir -p build
rolldown -c rolldown.config.mjs --logLevel warn >&2
componentize-js build/{{name}}.bundle.js --wit "$wit" --world-name reconciler \
  --disable http fetch-event stdio random clocks \
  --out build/{{name}}.wasm >&2
echo "build/{{name}}.wasm"
