#!/usr/bin/env sh
# Installs the JavaScript plugin toolchain (componentize-js, jco) from the npm registry
# into ~/.cache/capstan/jco-<jco>-componentize-js-<cjs>/ and prints its node_modules/.bin
# on stdout, the only thing this script writes there, so callers can
# `PATH="$(scripts/toolchain-js.sh):$PATH"`. A directory that exists is reused as is:
# its name pins both versions, and it only appears once an install completed.
#
# Overrides: CAPSTAN_JCO_VERSION, CAPSTAN_COMPONENTIZE_JS_VERSION (other pins),
# CAPSTAN_TOOLCHAIN_CACHE (instead of ~/.cache/capstan, or $XDG_CACHE_HOME/capstan).
set -eu

# componentize-js 0.23 is the newest; with `--disable` of every WASI feature its components
# import only capstan:reconciler. jco generates the SDK's declarations from the WIT (`jco
# guest-types`); not 1.35.0, whose preview2-shim 0.26 preopens no directory by default, so
# its `types` and `guest-types` cannot read any WIT file ("No such file or directory").
JCO_VERSION="${CAPSTAN_JCO_VERSION:-1.34.0}"
CJS_VERSION="${CAPSTAN_COMPONENTIZE_JS_VERSION:-0.23.0}"

cache="${CAPSTAN_TOOLCHAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capstan}"
dir="$cache/jco-$JCO_VERSION-componentize-js-$CJS_VERSION"

if [ ! -x "$dir/node_modules/.bin/componentize-js" ] || [ ! -x "$dir/node_modules/.bin/jco" ]; then
  command -v npm >/dev/null || { echo "toolchain-js: npm is needed (Node.js 20 or later)" >&2; exit 1; }
  mkdir -p "$cache"
  # Installed beside the final directory and renamed into place: an interrupted install
  # never leaves a directory that looks complete, and two concurrent builds do not mix.
  tmp="$(mktemp -d "$cache/.jco-install.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  cat >"$tmp/package.json" <<EOF
{
  "name": "capstan-toolchain-js",
  "private": true,
  "description": "componentize-js and jco for building Capstan plugins in JavaScript",
  "dependencies": {
    "@bytecodealliance/componentize-js": "$CJS_VERSION",
    "@bytecodealliance/jco": "$JCO_VERSION"
  }
}
EOF
  echo "toolchain-js: installing componentize-js $CJS_VERSION and jco $JCO_VERSION into $dir" >&2
  # stdout carries only the path, so npm's report goes to stderr.
  (cd "$tmp" && CI=true npm install --no-audit --no-fund --no-update-notifier --loglevel=error \
    --save-exact >&2)
  if [ -e "$dir" ]; then
    # Someone else finished first; theirs is as good.
    rm -rf "$tmp"
  else
    mv "$tmp" "$dir" || { rm -rf "$tmp"; [ -d "$dir" ] || exit 1; }
  fi
  trap - EXIT
fi

echo "$dir/node_modules/.bin"
