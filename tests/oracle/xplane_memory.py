"""TensorFlow's own memory figures in an XPlane, read independently of opscope.

Runs a small TensorFlow program under its profiler (host tracer level 3, which records
the allocator's `MemoryAllocation`/`MemoryDeallocation` events) into OUT_DIR, then reads
the XPlane with the XSpace protobuf classes and prints one JSON line: its path and, per
allocator (`allocator_name`), the events, bytes allocated and freed
(`allocation_bytes`), the peak of the allocator's own `bytes_allocated` and its own
`peak_bytes_in_use`.

Usage: xplane_memory.py OUT_DIR
"""
import glob
import json
import os
import sys

# TensorFlow records allocator events from its oneDNN allocator (`mklcpu`); its default
# turns oneDNN on for some CPUs only (on on the Intel machines the test was written on,
# off on an AMD EPYC, where the XPlane then held no allocator events at all).
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "1"

import tensorflow as tf  # noqa: E402  (after the setting it reads at import)
from tensorflow.tsl.profiler.protobuf import xplane_pb2


def record(out):
    options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=3, python_tracer_level=0, device_tracer_level=0)
    tf.profiler.experimental.start(out, options=options)
    x = tf.random.uniform((256, 256))
    for _ in range(5):
        y = tf.matmul(x, x)
        z = tf.concat([y, y], 0)
        x = z[:256] * 0.5
    tf.profiler.experimental.stop()
    return glob.glob(os.path.join(out, "**", "*.xplane.pb"), recursive=True)[0]


def value(stat, stat_metadata):
    kind = stat.WhichOneof("value")
    v = getattr(stat, kind)
    return stat_metadata[v].name if kind == "ref_value" else v


def main():
    path = record(sys.argv[1])
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    allocators = {}
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if name not in ("MemoryAllocation", "MemoryDeallocation"):
                    continue
                stats = {plane.stat_metadata[s.metadata_id].name: value(s, plane.stat_metadata) for s in event.stats}
                a = allocators.setdefault(
                    stats["allocator_name"],
                    {"events": 0, "allocated": 0, "freed": 0, "peak_bytes_allocated": 0, "peak_bytes_in_use": 0},
                )
                a["events"] += 1
                a["allocated" if name == "MemoryAllocation" else "freed"] += stats["allocation_bytes"]
                a["peak_bytes_allocated"] = max(a["peak_bytes_allocated"], stats["bytes_allocated"])
                a["peak_bytes_in_use"] = max(a["peak_bytes_in_use"], stats["peak_bytes_in_use"])
    print(json.dumps({"path": path, "allocators": allocators}))


if __name__ == "__main__":
    main()
