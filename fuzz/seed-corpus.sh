#!/bin/sh
# Fills fuzz/corpus/<target>/ with a few small real traces (gitignored: the traces under
# ../shared are not ours to commit). Run from anywhere; needs target/release/opscope
# (built here if missing) to write the Perfetto seeds.
set -eu
fuzz=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$fuzz")
shared=${SHARED_TRACES:-$root/../shared/traces}
opscope=$root/target/release/opscope
[ -x "$opscope" ] || (cd "$root" && cargo build --release -p opscope)

json="$shared/kineto/hta/call_stack/backward_thread.json
$shared/tf-timeline/xprof-demo/trace.json
$shared/tf-timeline/dorsal/trace_matrix_multiplication_All-Series.json
$shared/tf-timeline/dorsal/test_thread/trace_addition_All-Series_2017_6_29_15_35.json
$shared/tf-timeline/dorsal/test_thread/trace_addition_All-Series_2017_6_29_15_42.json
$root/examples/traces/mlp-train.json"
gz="$shared/kineto/hta/trace_compare/base/base.json.gz
$shared/kineto/hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"

mkdir -p "$fuzz/corpus/chrome_json" "$fuzz/corpus/perfetto" "$fuzz/corpus/detect_and_gzip" "$fuzz/corpus/xplane" \
    "$fuzz/corpus/tensorflow" "$fuzz/corpus/nsys"
mlp="$shared/tf-timeline/generated-here/tf2.21-cpu-mlp"
{ cat "$mlp/graph.pbtxt"; printf '\377'; cat "$mlp/run_meta"; } >"$fuzz/corpus/tensorflow/mlp"
cp "$mlp/run_meta" "$fuzz/corpus/tensorflow/run_meta_alone"
cp "$shared/nsys-sqlite/saxpy-mpi-cuda_nsys_perlmutter0.sqlite" "$fuzz/corpus/nsys/saxpy.sqlite"
cp "$shared"/xplane/generated-here/keras-cpu-tf2.21/vm.xplane.pb "$fuzz/corpus/xplane/keras.xplane.pb"
cp "$shared"/xplane/GPU-multi-worker/*.xplane.pb "$fuzz/corpus/xplane/gpu-multi-worker.xplane.pb"
for f in $json; do
    name=$(echo "${f#"$shared"/}" | sed "s|^$root/||" | tr / _)
    cp "$f" "$fuzz/corpus/chrome_json/$name"
    cp "$f" "$fuzz/corpus/detect_and_gzip/$name"
    "$opscope" convert "$f" -o "$fuzz/corpus/perfetto/${name%.json}.pftrace" >/dev/null
done
for f in $gz; do
    name=$(echo "${f#"$shared"/}" | tr / _)
    cp "$f" "$fuzz/corpus/detect_and_gzip/$name"
done
cp "$fuzz/corpus/perfetto/"*.pftrace "$fuzz/corpus/detect_and_gzip/"
# CTF: metadata files (text and packetized) for the TSDL parser; for the stream
# decoder, the first 16 KiB of real stream files behind a byte that picks the byte order.
mkdir -p "$fuzz/corpus/ctf_metadata" "$fuzz/corpus/ctf_stream"
for t in perf-taskset2 dpdk_service_cores debuginfo-test-app3 cyg-profile/glxgears-cyg-profile memory; do
    cp "$shared/ctf/tracecompass/$t/metadata" "$fuzz/corpus/ctf_metadata/$(echo "$t" | tr / _)"
done
for f in memory/channel0_0 many-threads/channel0_0 cyg-profile/glxgears-cyg-profile/channel0_0; do
    { printf '\000'; head -c 16384 "$shared/ctf/tracecompass/$f"; } > "$fuzz/corpus/ctf_stream/$(echo "$f" | tr / _)"
done
chmod -R u+w "$fuzz/corpus"
ls -l "$fuzz/corpus"/*
