#!/bin/sh
# Build Echo's Wasm component (build/echo-py.wasm) with componentize-py.
#
# Where things come from, each overridable:
#   COMPONENTIZE_PY     the componentize-py executable. Default: inside a Capstan checkout,
#                       what scripts/toolchain-python.sh installs (the pinned version);
#                       elsewhere, componentize-py on PATH.
#   CAPSTAN_WIT         the directory holding capstan:reconciler@0.3.0's WIT. Default:
#                       the checkout's wit/ (../../wit).
#   CAPSTAN_SDK_PYTHON  the directory holding the capstan_sdk package. Default: the
#                       checkout's sdk/python/src, else wherever `python3 -c 'import
#                       capstan_sdk'` finds it (pip install capstan-sdk).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"

if [ -z "${COMPONENTIZE_PY:-}" ]; then
    if [ -x "$root/scripts/toolchain-python.sh" ]; then
        COMPONENTIZE_PY=$("$root/scripts/toolchain-python.sh")
    elif command -v componentize-py >/dev/null 2>&1; then
        COMPONENTIZE_PY=componentize-py
    else
        echo "build.sh: componentize-py not found: set COMPONENTIZE_PY or put it on PATH (pip install componentize-py==0.25.1)" >&2
        exit 1
    fi
fi

wit=${CAPSTAN_WIT:-$root/wit}
if [ ! -f "$wit/reconciler.wit" ]; then
    echo "build.sh: no reconciler.wit in $wit: set CAPSTAN_WIT to the directory of capstan:reconciler@0.3.0" >&2
    exit 1
fi

sdk=${CAPSTAN_SDK_PYTHON:-}
if [ -z "$sdk" ]; then
    if [ -d "$root/sdk/python/src/capstan_sdk" ]; then
        sdk=$root/sdk/python/src
    else
        sdk=$(python3 -c 'import capstan_sdk, os; print(os.path.dirname(os.path.dirname(capstan_sdk.__file__)))' 2>/dev/null) || {
            echo "build.sh: capstan_sdk not found: pip install capstan-sdk, or set CAPSTAN_SDK_PYTHON" >&2
            exit 1
        }
    fi
fi

mkdir -p build
# Written beside the output and renamed, so a failed build never leaves a partial
# component where `capstan test` would load it.
"$COMPONENTIZE_PY" -d "$wit" -w reconciler componentize app -p "$here" -p "$sdk" -o build/echo-py.wasm.tmp
mv build/echo-py.wasm.tmp build/echo-py.wasm
echo "build.sh: wrote $here/build/echo-py.wasm" >&2
