#!/usr/bin/env bash
# Runs every benchmark under bench/, one after the other, on the release build, and keeps
# what each printed in target/bench/NAME.md (its tables, under its header line: date,
# commit, cores, load average), its last line naming the file of its raw results (under
# target/bench/). BENCHMARKS.md holds these outputs. Run it on a machine left alone:
# about an hour on 2 cores.
#
#   bench/all.sh              # everything
#   bench/all.sh view sql     # only the benchmarks named (the NAMEs below)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace --quiet
PY=$(bench/setup-venv.sh | tail -n 1)
out=target/bench
mkdir -p "$out"

run() {
    local name=$1
    shift
    if [ ${#only[@]} -gt 0 ] && [[ ! " ${only[*]} " == *" $name "* ]]; then
        return
    fi
    echo "== $name: $*" >&2
    local began=$SECONDS
    "$@" > "$out/$name.md"
    echo "   $((SECONDS - began)) s" >&2
}

only=("$@")
run info "$PY" bench/vs_peers.py --task info
run load python3 bench/load.py
run gpu "$PY" bench/vs_peers.py --task gpu
run ctf "$PY" bench/vs_peers.py --task ctf
run ctf-own "$PY" bench/vs_peers.py --task ctf-own
run xplane "$PY" bench/vs_peers.py --task xplane
run record python3 bench/record.py --task all
run record-jax python3 bench/record.py --task jax --repeat 3
run agent python3 bench/agent.py
run view "$PY" bench/view.py
run diff "$PY" bench/diff.py
run parquet python3 bench/parquet.py
if [ ${#only[@]} -eq 0 ] || [[ " ${only[*]} " == *" python "* ]]; then
    # The Python module of this very tree, as a user installs it (a wheel through pip).
    wheels=$(mktemp -d)
    "$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$wheels" .
    WHEEL_VENV="${OPSCOPE_CACHE:-$HOME/.cache/opscope-ci}/venv-wheel"
    [ -x "$WHEEL_VENV/bin/python" ] || python3 -m venv "$WHEEL_VENV"
    "$WHEEL_VENV/bin/pip" install --quiet --disable-pip-version-check -r python/tests/requirements.txt
    "$WHEEL_VENV/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps \
        "$wheels"/opscope-*.whl
    rm -rf "$wheels"
fi
# OPSCOPE_BASELINE_PYTHON: a Python with another build of opscope (the previous
# commit's wheel), for the reports' ratio.
run python python3 bench/python.py --python "${OPSCOPE_CACHE:-$HOME/.cache/opscope-ci}/venv-wheel/bin/python" \
    ${OPSCOPE_BASELINE_PYTHON:+--baseline-python "$OPSCOPE_BASELINE_PYTHON"}
run sql "$PY" bench/sql.py
run report python3 bench/report.py
run advise python3 bench/advise.py
run attach python3 bench/attach.py
