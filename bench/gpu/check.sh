#!/usr/bin/env bash
# The GPU check: `opscope record --cupti` of a program that knows what it did.
#
#   bench/gpu/check.sh --bundle DIR   gather what a GPU node needs into DIR (here)
#   bench/gpu/check.sh --stand-in     the same checks here, against stand-in libcuda
#                                     and libcupti (no GPU)
#   ./check.sh                        from DIR on the GPU node: the checks
#
# On the node nothing is built and nothing is fetched: DIR holds the opscope binary and
# its injected library, the check's program (cuda_check: the CUDA driver API alone,
# its kernels from PTX text the driver compiles), and libcupti from the pinned
# nvidia-cuda-cupti-cu12 wheel; the node needs only the NVIDIA driver (libcuda.so.1).
# Each check prints one line, `ok`, `FAIL` or `skip` (with why); the exit status is 1
# when any failed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CUPTI_WHEEL="nvidia-cuda-cupti-cu12==12.9.79"
MAX_BUNDLE_BYTES=$((64 << 20))

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }

failed=0
ok() { echo "ok    $*"; }
fail() { echo "FAIL  $*"; failed=1; }
skip() { echo "skip  $*"; }

# The value of `key` lines of the program's report: `value KEY [NAME]`.
value() { awk -v k="$1" -v n="${2:-}" '$1 == k && (n == "" || $2 == n) { print $NF; exit }' "$work/program.txt"; }

# A kernel's (or copy's) column of `stats kernel --memory --format csv`: instances,
# total_ns or avg_ns.
kernel_stat() {
    awk -F, -v name="$1" -v col="$2" '
        NR == 1 { for (i = 1; i <= NF; i++) at[$i] = i; next }
        $NF == name { print $(at[col]); exit }' "$work/kernels.csv"
}

# A direction's bytes in `gpu --format json`'s transfers (memcpy_h2d, memset, ...).
transfer_bytes() {
    tr -d ' \n' < "$work/gpu.json" |
        { grep -o "\"direction\":\"$1\",\"count\":[0-9]*,\"bytes\":[0-9]*" || true; } |
        sed 's/.*"bytes"://' | awk '{ s += $1 } END { printf "%.0f\n", s }'
}

# Records the program with `opscope record --cupti` and checks what it recorded.
# Environment: opscope, program, work; LD_LIBRARY_PATH where libcupti (and on the
# stand-in, libcuda) are.
run_checks() {
    mkdir -p "$work"
    echo "== opscope record --cupti -- cuda_check (in $work)"
    if ! "$opscope" record --cupti -q -o "$work/session" -- "$program" > "$work/program.txt" 2> "$work/record.txt"; then
        cat "$work/record.txt" "$work/program.txt"
        fail "the program or the recording failed"
        return
    fi
    if grep -q '^error' "$work/program.txt"; then
        fail "the program: $(grep '^error' "$work/program.txt" | head -1)"
        return
    fi
    grep -v '^$' "$work/record.txt" | sed 's/^/      /' || true
    "$opscope" stats kernel --memory --format csv -q "$work/session" > "$work/kernels.csv"
    "$opscope" gpu --format json -q "$work/session" > "$work/gpu.json"
    "$opscope" convert -q "$work/session" -o "$work/session.json" 2> /dev/null

    # Kernels: each launch seen once, graph launches' kernels included.
    for name in scale add; do
        launched=$(value kernel "$name")
        in_graphs=$(value graph_kernels "$name"); in_graphs=${in_graphs:-0}
        seen=$(kernel_stat "$name" Instances); seen=${seen:-0}
        want=$((launched + in_graphs))
        if [ "$seen" = "$want" ]; then
            ok "kernel $name: $seen seen, $launched launched + $in_graphs by graph launches"
        else
            fail "kernel $name: $seen seen, $want launched ($in_graphs by graph launches)"
        fi
        # Their time. Each kernel lies between the CUDA events recorded around it: the
        # mean recorded is at most the mean between events; and the shortest recorded is
        # at least half the shortest between events (the one with the least host delay
        # in it; a loaded host stretches the others).
        events_ns=$(value kernel_ns "$name")
        events_min_ns=$(value kernel_min_ns "$name")
        mean_ns=$(kernel_stat "$name" avg_ns)
        min_ns=$(kernel_stat "$name" min_ns)
        if [ -n "$mean_ns" ] && [ -n "$events_ns" ] && [ -n "$events_min_ns" ]; then
            verdict=$(awk -v m="$mean_ns" -v e="$events_ns" -v n="$launched" \
                -v lo="$min_ns" -v elo="$events_min_ns" 'BEGIN {
                per = e / n
                good = m <= per * 1.02 && lo >= elo * 0.5 && lo <= elo * 1.02
                printf "%s %.0f %.0f %.0f %.0f", good ? "ok" : "FAIL", m, per, lo, elo }')
            set -- $verdict
            line="kernel $name: mean $2 ns recorded, $3 ns between events; shortest $4 ns recorded, $5 ns between events"
            if [ "$1" = ok ]; then ok "$line"; else fail "$line"; fi
        fi
    done

    # Graph kernels: each names the graph node it ran as; every launch of the graph runs
    # each of its nodes once.
    in_graphs=$(value graph_kernels scale); nodes=$(value graph_nodes)
    read -r graphed distinct < <(
        { grep '"cat":"kernel"' "$work/session.json" || true; } |
            { grep -o '"graph_node_id":[0-9]*' || true; } | sort | uniq -c |
            awk '{ n += $1; k++ } END { printf "%d %d\n", n, k }')
    if [ "$graphed" = "${in_graphs:-0}" ] && [ "$distinct" = "${nodes:-0}" ]; then
        ok "graph nodes: $graphed kernels ran as $distinct nodes of a graph, as launched"
    else
        fail "graph nodes: $graphed kernels ran as $distinct graph nodes; ${in_graphs:-?} ran as ${nodes:-?} nodes"
    fi

    # Copies by direction, and the memset, with their bytes.
    for pair in htod:memcpy_h2d dtoh:memcpy_d2h dtod:memcpy_d2d memset:memset; do
        key=${pair%%:*}; direction=${pair#*:}
        if [ "$key" = memset ]; then want=$(value memset); else want=$(value copy "$key"); fi
        got=$(transfer_bytes "$direction")
        if [ "$got" = "$want" ]; then
            ok "$key: $got bytes recorded, as made"
        else
            fail "$key: $got bytes recorded, $want made"
        fi
    done

    # Launches: each kernel, copy and memset linked to the driver call that queued it
    # (CUPTI's correlation ids, through opscope's links).
    work_items=$({ grep -cE '"cat":"(kernel|gpu_memcpy|gpu_memset)"' "$work/session.json" || true; })
    linked=$(tr -d ' \n' < "$work/gpu.json" | { grep -o '"launched":[0-9]*' || true; } |
        sed 's/.*://' | awk '{ s += $1 } END { print s + 0 }')
    if [ "${work_items:-0}" -gt 0 ] && [ "$linked" = "$work_items" ]; then
        ok "launches: each of the $work_items kernels, copies and memsets linked to the call that queued it"
    else
        fail "launches: $linked of ${work_items:-0} kernels, copies and memsets linked to the call that queued them"
    fi

    # Records CUPTI dropped are told in the session.
    lost=$({ grep -o '"dropped":[0-9]*' "$work/session.json" || true; } | sed 's/.*://' | awk '{ s += $1 } END { print s + 0 }')
    if [ "$lost" = 0 ]; then
        ok "dropped records: none"
    else
        fail "dropped records: $lost (the buffers could not keep up)"
    fi

    # NVML: the device's utilisation and memory sampled through the run (GPU 0's
    # counters); on a real GPU its memory in use holds at least what the program held.
    read -r samples top_util top_used < <(
        { grep '"ph":"C"' "$work/session.json" || true; } | grep '"pid":-1,' |
            awk -F'[:,}]' '
                # The value follows its name as a key of args: {"GPU utilisation %":37.0}.
                function after(key,    i, v) { v = 0
                    for (i = 1; i < NF; i++) if ($i ~ key && $(i + 1) + 0 > v) v = $(i + 1) + 0
                    return v }
                /"name":"GPU utilisation %"/ { n++; u = after("\"GPU utilisation %\"$"); if (u > mu) mu = u }
                /"name":"GPU memory used bytes"/ { m = after("\"GPU memory used bytes\"$"); if (m > mm) mm = m }
                END { printf "%d %.0f %.0f\n", n, mu, mm }')
    allocated=$(value allocated)
    if [ "$samples" -eq 0 ]; then
        fail "NVML: no utilisation samples of GPU 0 in the session"
    elif [ "$nvml_fixed" = 1 ]; then
        ok "NVML: $samples utilisation samples of GPU 0 (up to $top_util %), memory used up to $top_used bytes (a stand-in's fixed readings)"
    elif [ "$top_used" -ge "${allocated:-0}" ]; then
        ok "NVML: $samples utilisation samples of GPU 0 (up to $top_util %), memory used up to $top_used bytes (the program held $allocated)"
    else
        fail "NVML: memory used up to $top_used bytes, less than the $allocated the program held"
    fi

    # NVML's list of the device's processes: the program's own memory on GPU 0, which on
    # a GPU also holds its context, so at least what it allocated.
    pid=$(value pid)
    read -r held_samples held_top < <(
        { grep '"ph":"C"' "$work/session.json" || true; } | grep "\"pid\":${pid:-none}," |
            awk -F'[:,}]' '
                /"name":"GPU 0 memory bytes"/ { for (i = 1; i < NF; i++)
                    if ($i ~ /"GPU 0 memory bytes"$/) { n++; if ($(i + 1) + 0 > m) m = $(i + 1) + 0 } }
                END { printf "%d %.0f\n", n, m }')
    if [ "$held_samples" -eq 0 ]; then
        fail "per-process GPU memory: no sample of the program's (pid ${pid:-?}) memory on GPU 0"
    elif [ "$held_top" -ge "${allocated:-0}" ]; then
        ok "per-process GPU memory: the program (pid $pid) held up to $held_top bytes on GPU 0 in $held_samples samples (it allocated $allocated)"
    else
        fail "per-process GPU memory: the program (pid $pid) held up to $held_top bytes on GPU 0, less than the $allocated it allocated"
    fi

    # The clock: the device's work lies inside the program's own run (CLOCK_MONOTONIC),
    # which it synchronised with before it ended.
    read -r _ start end < <(grep '^monotonic ' "$work/program.txt")
    read -r first last < <(
        { grep -E '"cat":"(kernel|gpu_memcpy|gpu_memset)"' "$work/session.json" || true; } |
            grep -o '"ts":[0-9.]*,"dur":[0-9.]*' |
            awk -F'[:,]' '{ s = $2 * 1000; e = s + $4 * 1000
                            if (!n++ || s < a) a = s; if (e > b) b = e }
                          END { if (n) printf "%.0f %.0f\n", a, b; else print "- -" }')
    if [ "$first" != - ] && [ "$first" -ge "$start" ] && [ "$last" -le "$end" ]; then
        ok "clock: the device's work ($first..$last ns) lies in the program's run ($start..$end ns, CLOCK_MONOTONIC)"
    else
        fail "clock: the device's work ($first..$last ns) is not inside the program's run ($start..$end ns)"
    fi
}

# The injected library beside a build's opscope: `cargo build` puts it there, `cargo
# test` (all CI does) only in deps/; the newer of the two.
record_lib_of() {
    local dir newest="" candidate
    dir="$(dirname "$1")"
    for candidate in "$dir/libopscope_record.so" "$dir/deps/libopscope_record.so"; do
        [ -f "$candidate" ] || continue
        if [ -z "$newest" ] || [ "$candidate" -nt "$newest" ]; then newest="$candidate"; fi
    done
    echo "${newest:-$dir/libopscope_record.so}"
}

# If the node has torch with CUDA: a small training loop recorded by opscope, and the
# same loop under torch.profiler; each kernel name seen as often by both.
# Environment: opscope, here, work, node_library_path (LD_LIBRARY_PATH as the node had
# it: torch must load its own libcupti, not the bundle's).
torch_checks() {
    local python dir
    python=$(command -v python3 || true)
    if [ -z "$python" ] || ! LD_LIBRARY_PATH="$node_library_path" "$python" -c \
        'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
        skip "torch: no python3 with torch and a CUDA device on this node"
        return
    fi
    dir="$work/torch"
    mkdir -p "$dir"
    echo "== opscope record --cupti -- python3 torch_check.py plain (in $dir)"
    if ! LD_LIBRARY_PATH="$node_library_path" "$opscope" record --cupti -q -o "$dir/session" \
        -- "$python" "$here/torch_check.py" plain > "$dir/plain.txt" 2> "$dir/record.txt"; then
        cat "$dir/record.txt" "$dir/plain.txt"
        fail "torch: the recorded run failed"
        return
    fi
    if ! LD_LIBRARY_PATH="$node_library_path" "$python" "$here/torch_check.py" profiled \
        "$dir/profiler.json" > "$dir/profiled.txt" 2>&1; then
        cat "$dir/profiled.txt"
        fail "torch: the run under torch.profiler failed"
        return
    fi
    "$opscope" stats kernel --format json -q "$dir/session" > "$dir/stats.json"
    "$python" "$here/torch_check.py" stats "$dir/stats.json" > "$dir/ours.txt"
    "$python" "$here/torch_check.py" kernels "$dir/profiler.json" > "$dir/theirs.txt"
    "$python" "$here/torch_check.py" compare "$dir/ours.txt" "$dir/theirs.txt" || failed=1
}

case "${1:-}" in
--bundle)
    dir="${2:?--bundle DIR}"
    repo="$(cd "$here/../.." && pwd)"
    cache="${OPSCOPE_CACHE:-$HOME/.cache/opscope-ci}"
    # The newer of the release and the test build (CI has only the latter).
    opscope_bin="$repo/target/debug/opscope"
    [ "$repo/target/release/opscope" -nt "$opscope_bin" ] && opscope_bin="$repo/target/release/opscope"
    opscope_bin="${OPSCOPE_BIN:-$opscope_bin}"
    record_lib="$(record_lib_of "$opscope_bin")"
    [ -x "$opscope_bin" ] && [ -f "$record_lib" ] || {
        echo "no opscope build: cargo build --release -p opscope -p opscope-record" >&2
        exit 2
    }
    rm -rf "$dir"
    mkdir -p "$dir/lib"
    # libcupti from the pinned wheel (the wheel is ~11 MB; only libcupti.so.12 is kept).
    wheels="$cache/cupti-wheel"
    if [ ! -f "$wheels/libcupti.so.12" ]; then
        mkdir -p "$wheels"
        "${PIP:-pip}" download --quiet --disable-pip-version-check --no-deps -d "$wheels" "$CUPTI_WHEEL"
        python3 -m zipfile -e "$wheels"/nvidia_cuda_cupti_cu12-*.whl "$wheels/unpacked"
        cp "$wheels/unpacked/nvidia/cuda_cupti/lib/libcupti.so.12" "$wheels/"
        rm -rf "$wheels/unpacked"
    fi
    cp "$wheels/libcupti.so.12" "$dir/lib/"
    cc -O2 -o "$dir/cuda_check" "$here/cuda_check.c" -ldl
    # Symbols are not needed on the node: stripped, the binary is a quarter the size.
    strip -o "$dir/opscope" "$opscope_bin"
    strip -o "$dir/libopscope_record.so" "$record_lib"
    cp "$0" "$dir/check.sh"
    cp "$here/torch_check.py" "$dir/"
    echo "== $dir"
    (cd "$dir" && find . -type f -printf '%10s  %p\n' | sort -k2)
    total=$(find "$dir" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }')
    echo "total $total bytes ($((total >> 20)) MiB; at most $((MAX_BUNDLE_BYTES >> 20)) MiB)"
    [ "$total" -le "$MAX_BUNDLE_BYTES" ] || { echo "the bundle is too large" >&2; exit 1; }
    echo "on the GPU node: cd $(basename "$dir") && ./check.sh"
    ;;
--stand-in)
    repo="$(cd "$here/../.." && pwd)"
    opscope="${OPSCOPE_BIN:-$repo/target/debug/opscope}"
    export OPSCOPE_RECORD_LIB="${OPSCOPE_RECORD_LIB:-$(record_lib_of "$opscope")}"
    headers="${OPSCOPE_CUDA_HEADERS:-$("$repo/tests/cuda-headers.sh" "${OPSCOPE_CACHE:-$HOME/.cache/opscope-ci}/cuda-headers" "${PIP:-pip}")}"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    includes=()
    IFS=: read -r -a dirs <<< "$headers"
    for d in "${dirs[@]}"; do includes+=("-I$d"); done
    mkdir -p "$work/lib"
    cc -O2 -shared -fPIC "${includes[@]}" -o "$work/lib/libcupti.so.12" "$repo/tests/record/stand_in_cupti.c"
    cc -O2 -shared -fPIC -o "$work/lib/libcuda.so.1" "$here/stand_in_cuda.c" -ldl
    cc -O2 -shared -fPIC -o "$work/lib/libnvidia-ml.so.1" "$repo/tests/record/fake_nvml.c"
    nvml_fixed=1
    cc -O2 -o "$work/cuda_check" "$here/cuda_check.c" -ldl
    program="$work/cuda_check"
    # The PTX the driver will compile on the node, assembled here for three generations.
    ptxas="${dirs[-1]%/include}/bin/ptxas"
    if [ -x "$ptxas" ]; then
        "$program" --ptx > "$work/check.ptx"
        for arch in sm_50 sm_80 sm_90; do
            if "$ptxas" -arch="$arch" "$work/check.ptx" -o "$work/check-$arch.cubin" 2> "$work/ptxas.txt"; then
                ok "PTX: assembles for $arch (ptxas from the pinned nvcc wheel)"
            else
                fail "PTX: does not assemble for $arch: $(head -3 "$work/ptxas.txt")"
            fi
        done
    else
        skip "PTX: no ptxas beside the headers (tests/cuda-headers.sh keeps one)"
    fi
    export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # The stand-in libcuda tells the stand-in NVML what the program holds, through a file.
    export FAKE_NVML_PROCESSES="$work/gpu-processes.txt"
    echo "== against the stand-in libcuda and libcupti (no GPU)"
    work="$work/run" run_checks
    # No torch against a stand-in; the torch comparison's own plumbing (opscope's
    # kernel table, a Chrome trace's, compared) on the run above and its Chrome export.
    "$opscope" stats kernel --format json -q "$work/run/session" > "$work/stats.json"
    python3 "$here/torch_check.py" stats "$work/stats.json" > "$work/ours.txt"
    python3 "$here/torch_check.py" kernels "$work/run/session.json" > "$work/theirs.txt"
    if python3 "$here/torch_check.py" compare "$work/ours.txt" "$work/theirs.txt" > "$work/compare.txt"; then
        ok "torch comparison (its plumbing, on the run above): $(cut -c7- "$work/compare.txt")"
    else
        cat "$work/compare.txt"
        fail "torch comparison: the run above against its own Chrome export"
    fi
    skip "torch: no torch with CUDA against a stand-in"
    exit $failed
    ;;
"")
    opscope="$here/opscope"
    export OPSCOPE_RECORD_LIB="$here/libopscope_record.so"
    program="$here/cuda_check"
    node_library_path="${LD_LIBRARY_PATH:-}"
    export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    work="$(mktemp -d)"
    echo "== on $(hostname): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo 'no nvidia-smi')"
    nvml_fixed=0
    # Both module loading modes: lazy (the default since CUDA 12.2) loads each kernel at
    # its first launch, after the context and the injection; eager at cuModuleLoad.
    CUDA_MODULE_LOADING=LAZY work="$work/lazy" run_checks
    echo "== again with CUDA_MODULE_LOADING=EAGER"
    CUDA_MODULE_LOADING=EAGER work="$work/eager" run_checks
    torch_checks
    echo "what was recorded: $work"
    exit $failed
    ;;
-h | --help)
    usage
    ;;
*)
    usage >&2
    exit 2
    ;;
esac
