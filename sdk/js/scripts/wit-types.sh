#!/usr/bin/env sh
# Regenerates types/wit/ (the WIT's TypeScript declarations, as componentize-js presents
# the world to a guest) with `jco guest-types`. Run after a change to the WIT; the output is
# committed so the package needs no toolchain to install.
#   WIT=path/to/wit  JCO=path/to/jco  sh scripts/wit-types.sh
set -eu
here="$(cd "$(dirname "$0")/.." && pwd)"
wit="${WIT:-$here/../../wit}"
if [ -z "${JCO:-}" ]; then
  if [ -x "$here/../../scripts/toolchain-js.sh" ]; then
    JCO="$("$here/../../scripts/toolchain-js.sh")/jco"
  else
    JCO="$(command -v jco)"
  fi
fi
rm -rf "$here/types/wit"
"$JCO" guest-types "$wit" --world-name reconciler --out-dir "$here/types/wit" --quiet
