#!/bin/sh
# Build build/{{name}}.wasm, the plugin's Wasm component, with componentize-py
# (`capstan build` runs this, as capstan.toml says).
#
# Where things come from, each overridable:
#   COMPONENTIZE_PY  the componentize-py executable. Default: componentize-py on PATH
#                    (pip install componentize-py==0.25.1).
#   the SDK          SDK_PATH below: the SDK the `capstan` binary that made this project
#                    carries (extracted into its cache), or `capstan new --sdk CHECKOUT`'s.
#                    Emptied, the capstan_sdk package installed for $PYTHON (default
#                    python3, or the Python beside componentize-py).
#   CAPSTAN_WIT      the directory holding capstan:reconciler@0.3.0's WIT. Default: the
#                    one the SDK ships (capstan_sdk.wit_dir()), or SDK_PATH/../wit.
set -eu
cd "$(dirname "$0")"

SDK_PATH="{{sdk-path}}"

fail() { echo "build.sh: $*" >&2; exit 1; }

componentize=${COMPONENTIZE_PY:-$(command -v componentize-py || true)}
[ -n "$componentize" ] || fail "componentize-py not found: set COMPONENTIZE_PY or put it on PATH (pip install componentize-py==0.25.1)"

if [ -n "$SDK_PATH" ]; then
    sdk=$SDK_PATH/python/src
    wit=${CAPSTAN_WIT:-$SDK_PATH/../wit}
    [ -d "$sdk/capstan_sdk" ] || fail "no capstan_sdk in $sdk"
else
    # The first Python that imports capstan_sdk says where it and its WIT are.
    found=
    for python in ${PYTHON:-python3 "$(dirname "$componentize")/python"}; do
        found=$("$python" -c 'import capstan_sdk, os; print(os.path.dirname(os.path.dirname(capstan_sdk.__file__))); print(capstan_sdk.wit_dir())' 2>/dev/null) && break
        found=
    done
    [ -n "$found" ] || fail "capstan_sdk not found: pip install capstan-sdk (for python3, or set PYTHON)"
    sdk=$(echo "$found" | sed -n 1p)
    wit=${CAPSTAN_WIT:-$(echo "$found" | sed -n 2p)}
fi
[ -f "$wit/reconciler.wit" ] || fail "no reconciler.wit in $wit: set CAPSTAN_WIT to the directory of capstan:reconciler@0.3.0"

mkdir -p build
# Written beside the output and renamed, so a failed build never leaves a partial
# component where `capstan test` would load it.
"$componentize" -d "$wit" -w reconciler componentize app -p . -p "$sdk" -o build/{{name}}.wasm.tmp
mv build/{{name}}.wasm.tmp build/{{name}}.wasm
echo "build.sh: wrote build/{{name}}.wasm" >&2
