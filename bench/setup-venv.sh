#!/usr/bin/env bash
# Creates (or reuses) the Python virtual environment that holds the peer tools the
# benchmarks compare opscope with, at the versions pinned in bench/requirements.txt.
#
#   bench/setup-venv.sh            # prints the venv's python as its last line
#   PY=$(bench/setup-venv.sh | tail -n 1)
#
# The venv lives at ${OPSCOPE_CACHE:-$HOME/.cache/opscope-ci}/venv. A stamp file in it
# holds a hash of the requirements and of the interpreter version; when it matches,
# nothing is installed and the script returns at once. $PYTHON picks the interpreter
# that creates a new venv (default: python3.11, else python3).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
requirements="$here/requirements.txt"
venv="${OPSCOPE_CACHE:-$HOME/.cache/opscope-ci}/venv"
stamp="$venv/.opscope-bench-stamp"

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c '' 2>/dev/null; then
    python=${PYTHON:-$(command -v python3.11 || command -v python3)}
    echo "creating $venv with $python" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv"
fi

want=$({ cat "$requirements"; "$venv/bin/python" -VV; } | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "installing bench/requirements.txt into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        -r "$requirements" >&2
    echo "$want" >"$stamp"
fi

echo "$venv/bin/python"
