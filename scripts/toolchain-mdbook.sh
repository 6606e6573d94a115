#!/bin/sh
# Install mdbook (the book in docs/) from crates.io into a directory keyed by version,
# then print the path of the mdbook executable on stdout and nothing else:
# callers do `MDBOOK=$(scripts/toolchain-mdbook.sh)`.
#
# Built without its `serve`, `watch` and `search` features: building and checking the
# book needs none of them, and they are most of its dependencies.
#
# Environment:
#   CAPSTAN_CACHE    cache root (default: ~/.cache/capstan)
set -eu

VERSION=0.5.4

cache=${CAPSTAN_CACHE:-$HOME/.cache/capstan}
root=$cache/mdbook-$VERSION
exe=$root/bin/mdbook

log() { echo "toolchain-mdbook: $*" >&2; }

# The marker is written last, so an interrupted install is redone rather than trusted.
if ! { [ -f "$root/.capstan-complete" ] && [ -x "$exe" ]; }; then
    log "installing mdbook $VERSION into $root (a few minutes, once)"
    rm -rf "$root"
    mkdir -p "$cache"
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    CARGO_TARGET_DIR=$build cargo install --quiet --locked mdbook --version "$VERSION" \
        --no-default-features --root "$root" >&2
    "$exe" --version >/dev/null || { log "mdbook $VERSION does not run"; exit 1; }
    touch "$root/.capstan-complete"
fi

echo "$exe"
