"""xprof as the oracle of TensorCore planes that vary what real TPU profiles vary, one
XSpace a variant: framework-op stats on the event or on its metadata, runs of one
framework op with and without groups and across gaps, several devices, a Steps line
(xprof names each step by its `step_num`, else its place, and groups the ops within a
step by it, whatever group they name), asynchronous ops on their own line (xprof does
not draw it, yet derives from it), and offloaded copies whose start and done lie on
different lines and overlap in many ways (seeded). Each is converted by xprof's trace
viewer; prints one JSON line: per variant, the XPlane's path and every complete event
of xprof's output as [plane, line, name, start ns, duration ns].

Usage: xplane_variants.py OUT_DIR
"""
import json
import os
import random
import sys

from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from xplane_derived import Plane, convert  # noqa: E402


def event(line, name, start, dur, display="", meta=None, **stats):
    return (line, name, start, dur, stats, meta or {}, display)


def build(path, devices):
    space = xplane_pb2.XSpace()
    space.hostnames.append("variant-host")
    host = Plane(space, 0, "/host:CPU")
    host.event(host.line(1, "python"), "train_step", 0, 200_000)
    for dev, events in enumerate(devices):
        tpu = Plane(space, 1 + dev, f"/device:TPU:{dev}")
        lines = {}
        for line, name, start, dur, stats, meta_stats, display in sorted(events, key=lambda e: e[2]):
            if line not in lines:
                lines[line] = tpu.line(len(lines) + 1, line)
            e = lines[line].events.add()
            e.metadata_id = tpu.metadata(name, display, **meta_stats)
            e.offset_ps = start * 1000
            e.duration_ps = dur * 1000
            tpu.set_stats(e.stats, stats)
    with open(path, "wb") as f:
        f.write(space.SerializeToString())


def stats_on_metadata():
    """Eight ops of one framework op, its `tf_op` on the event or on its metadata,
    grouped and not, with one long gap; on two devices."""
    events, t = [], 1000
    for i in range(8):
        stats = {"hlo_op": f"f.{i}", "hlo_module": "m"}
        if i < 4:
            stats["group_id"] = 1
        meta = {"tf_op": "model/layer/MatMul:MatMul"} if i % 2 else {}
        if not i % 2:
            stats["tf_op"] = "model/layer/MatMul:MatMul"
        events.append(event("XLA Ops", f"f.{i}", t, 300, meta=meta, **stats))
        t += 300 + (2000 if i == 5 else 50)
    return [events, events]


def steps_group_ops():
    """Three steps whose ops run one framework op with a gap: one event a step; ops
    naming groups of their own within a step and outside every step; steps named by
    `step_num` and by their place."""
    events, t = [], 1000
    for step in range(3):
        begin = t - 10
        for i in range(6):
            events.append(event("XLA Ops", f"fusion.{i}", t, 100, tf_op="m/Dense:Dense", hlo_module="m"))
            t += 100 + (1500 if i == 2 else 20)
        stats = {"step_num": step} if step != 1 else {}
        events.append(event("Steps", f"s{step}", begin, t - begin + 100, **stats))
        t += 3000
    events += [
        event("XLA Ops", "k1", 1500, 100, tf_op="m/D:D", group_id=8),
        event("XLA Ops", "k2", 1800, 100, tf_op="m/D:D", group_id=9),
        event("XLA Ops", "h1", t + 4000, 100, tf_op="m/C:C", group_id=7),
        event("XLA Ops", "h2", t + 4900, 100, tf_op="m/C:C", group_id=7),
    ]
    return [events]


def async_line_and_offloads(seed):
    """Collectives and offloaded copies on an `Async XLA Ops` line and on `XLA Ops`,
    start and done of a copy on either, overlapping (seeded), inside a step; on three
    devices that differ."""
    devices = []
    for dev in range(3):
        rnd = random.Random(seed * 10 + dev)
        events, t = [event("Steps", "7", 900, 40_000, step_num=7)], 1000
        for k in range(10):
            kind = rnd.choice(["copy", "dynamic-slice", "dynamic-update-slice"])
            i = rnd.randint(1, 3)
            start, dur, gap = t + rnd.randint(0, 400), rnd.randint(20, 200), rnd.randint(50, 1500)
            first, second = rnd.choice(["XLA Ops", "Async XLA Ops"]), rnd.choice(["XLA Ops", "Async XLA Ops"])
            events.append(event(first, f"%{kind}-start.{i} = f32[8]{{0:S(5)}} {kind}-start()", start, dur,
                                display=f"{kind}-start.{i}", tf_op="m/Copy:Copy"))
            events.append(event(second, f"%{kind}-done.{i} = f32[8]{{0:S(5)}} {kind}-done()", start + dur + gap,
                                rnd.randint(20, 100), display=f"{kind}-done.{i}", tf_op="m/Copy:Copy"))
            events.append(event("XLA Ops", f"fusion.{k}", start + 10, 50, tf_op="jit(f)/dot_general:dot_general",
                                source="f.py:3"))
            t += rnd.randint(50, 300)
        events.append(event("Async XLA Ops", "all-reduce-start.1", 1000, 2000, tf_op="jit(f)/psum:psum"))
        events.append(event("Async XLA Ops", "all-reduce-done.1", 4000, 100, tf_op="jit(f)/psum:psum"))
        devices.append(events)
    return devices


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    variants = {
        "stats_on_metadata": stats_on_metadata(),
        "steps_group_ops": steps_group_ops(),
    }
    for seed in range(3):
        variants[f"async_line_and_offloads_{seed}"] = async_line_and_offloads(seed)
    result = {}
    for name, devices in variants.items():
        path = os.path.join(out, f"{name}.xplane.pb")
        build(path, devices)
        result[name] = {"path": path, "events": convert(path)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
