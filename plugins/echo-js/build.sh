#!/usr/bin/env sh
# Builds build/echo-js.wasm: bundles component.js with the SDK (rolldown), then makes a
# component of the WIT world `reconciler` with componentize-js, every WASI feature of its
# engine disabled, so the component imports only capstan:reconciler/host.
#
# Where things come from (each overridable, so the plugin builds outside this repository):
#   toolchain  CAPSTAN_JS_TOOLCHAIN, a directory holding componentize-js and rolldown
#              (what scripts/toolchain-js.sh prints); else that script when this is the
#              Capstan repository; else PATH.
#   WIT        CAPSTAN_WIT, the wit/ directory; else ../../wit.
#   SDK        CAPSTAN_SDK_JS, the @capstan/sdk directory; else node_modules/@capstan/sdk
#              (npm install; package.json depends on file:../../sdk/js); else ../../sdk/js.
set -eu
cd "$(dirname "$0")"

if [ -n "${CAPSTAN_JS_TOOLCHAIN:-}" ]; then
  PATH="$CAPSTAN_JS_TOOLCHAIN:$PATH"
elif [ -x ../../scripts/toolchain-js.sh ]; then
  PATH="$(../../scripts/toolchain-js.sh):$PATH"
fi
for tool in componentize-js rolldown; do
  command -v "$tool" >/dev/null || {
    echo "build.sh: $tool not found: set CAPSTAN_JS_TOOLCHAIN or put it on PATH" >&2
    exit 1
  }
done

wit="${CAPSTAN_WIT:-../../wit}"
if [ -z "${CAPSTAN_SDK_JS:-}" ]; then
  if [ -f node_modules/@capstan/sdk/package.json ]; then
    CAPSTAN_SDK_JS="node_modules/@capstan/sdk"
  else
    CAPSTAN_SDK_JS="../../sdk/js"
  fi
fi
[ -f "$wit/reconciler.wit" ] || { echo "build.sh: no reconciler.wit in $wit: set CAPSTAN_WIT" >&2; exit 1; }
[ -f "$CAPSTAN_SDK_JS/package.json" ] || { echo "build.sh: no SDK at $CAPSTAN_SDK_JS: set CAPSTAN_SDK_JS" >&2; exit 1; }
CAPSTAN_SDK_JS="$(cd "$CAPSTAN_SDK_JS" && pwd -P)"
export CAPSTAN_SDK_JS

mkdir -p build
rolldown -c rolldown.config.mjs --logLevel warn >&2
componentize-js build/echo-js.bundle.js --wit "$wit" --world-name reconciler \
  --disable http fetch-event stdio random clocks \
  --out build/echo-js.wasm >&2
echo "build/echo-js.wasm"
