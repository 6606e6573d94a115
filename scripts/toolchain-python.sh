#!/bin/sh
# Install componentize-py (and pytest, for plugin tests) into a venv keyed by version,
# then print the path of the componentize-py executable on stdout and nothing else:
# callers do `COMPONENTIZE_PY=$(scripts/toolchain-python.sh)`.
#
# The venv lives outside the repository so every worktree and plugin shares one copy.
# Only PyPI is contacted, and only when the venv is missing or incomplete.
#
# Environment:
#   CAPSTAN_PYTHON   interpreter to build the venv with (default: python3)
#   CAPSTAN_CACHE    cache root (default: ~/.cache/capstan)
set -eu

# 0.25.1 is the newest release on PyPI at the time of writing and builds
# capstan:reconciler@0.3.0 (checked against the golden cases in tests/golden/echo).
VERSION=0.25.1
PYTEST_VERSION=9.2.0
PYYAML_VERSION=6.0.3

python=${CAPSTAN_PYTHON:-python3}
cache=${CAPSTAN_CACHE:-$HOME/.cache/capstan}
venv=$cache/componentize-py-$VERSION
exe=$venv/bin/componentize-py

# Everything but the final path goes to stderr, so command substitution gets one line.
log() { echo "toolchain-python: $*" >&2; }

# The marker is written last, so a venv left by an interrupted install is rebuilt rather
# than trusted.
ready() {
    [ -f "$venv/.capstan-complete" ] && [ -x "$exe" ]
}

if ! ready; then
    log "installing componentize-py $VERSION into $venv"
    rm -rf "$venv"
    mkdir -p "$cache"
    # Built in place: venv scripts hard-code their interpreter's path.
    "$python" -m venv "$venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        "componentize-py==$VERSION" "pytest==$PYTEST_VERSION" "PyYAML==$PYYAML_VERSION" >&2
    "$exe" --version >/dev/null || { log "componentize-py $VERSION does not run"; exit 1; }
    touch "$venv/.capstan-complete"
fi

echo "$exe"
