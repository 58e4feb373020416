"""xprof as the oracle of the lines its trace viewer derives from a TPU plane's stats.

Builds an XSpace with the XSpace protobuf classes: a host plane and a `/device:TPU:0`
(TensorCore) plane whose events carry the stats xprof derives lines from (`tf_op`,
`source`, `group_id`, and `_a`, xprof's is-async stat; on the event or on its metadata, as a string or a
reference), and offloaded `copy-start`/`copy-done` (and dynamic-slice) pairs on host
memory (`S(5)`). Then runs xprof's own trace-viewer conversion on it
(`xspace_to_tool_data(..., "trace_viewer", ...)`) and prints one JSON line: the XPlane's
path and every complete event of xprof's output as [plane, line, name, start ns,
duration ns].

Usage: xplane_derived.py OUT_DIR   (writes OUT_DIR/derived.xplane.pb)
"""
import decimal
import json
import os
import sys

from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402
from xprof.convert import raw_to_tool_data  # noqa: E402

# Line starts in ns. Small on purpose: xprof writes µs as doubles, and Unix-epoch
# times would lose the ns in them.
T0 = 1_000_000_000


class Plane:
    def __init__(self, space, pid, name):
        self.p = space.planes.add()
        self.p.id = pid
        self.p.name = name

    def stat_id(self, name):
        for k, m in self.p.stat_metadata.items():
            if m.name == name:
                return k
        k = len(self.p.stat_metadata) + 1
        self.p.stat_metadata[k].id = k
        self.p.stat_metadata[k].name = name
        return k

    def metadata(self, name, display="", **stats):
        for k, m in self.p.event_metadata.items():
            if m.name == name:
                return k
        k = len(self.p.event_metadata) + 1
        m = self.p.event_metadata[k]
        m.id = k
        m.name = name
        m.display_name = display
        self.set_stats(m.stats, stats)
        return k

    def set_stats(self, target, stats):
        for key, value in stats.items():
            s = target.add()
            s.metadata_id = self.stat_id(key)
            if isinstance(value, str):
                if value.startswith("@"):
                    # A reference: the value is the name of a stat metadata.
                    s.ref_value = self.stat_id(value[1:])
                else:
                    s.str_value = value
            else:
                s.int64_value = value

    def line(self, line_id, name):
        line = self.p.lines.add()
        line.id = line_id
        line.name = name
        line.timestamp_ns = T0
        return line

    def event(self, line, name, start_ns, dur_ns, display="", **stats):
        e = line.events.add()
        e.metadata_id = self.metadata(name, display)
        e.offset_ps = start_ns * 1000
        e.duration_ps = dur_ns * 1000
        self.set_stats(e.stats, stats)
        return e


def build(path):
    space = xplane_pb2.XSpace()
    space.hostnames.append("oracle-host")
    host = Plane(space, 0, "/host:CPU")
    host.event(host.line(1, "python"), "train_step", 0, 200_000)

    tpu = Plane(space, 1, "/device:TPU:0")
    ops = tpu.line(1, "XLA Ops")
    t = 1000

    def op(hlo, tf, src, dur=500, gap=100, group=1, line=ops, **more):
        nonlocal t
        stats = dict(hlo_op=hlo, hlo_module="jit_train", group_id=group, **more)
        if tf is not None:
            stats["tf_op"] = tf
        if src is not None:
            stats["source"] = src
        tpu.event(line, hlo, t, dur, **stats)
        t += dur + gap

    # TensorFlow ops: runs of one op merge, scopes nest and merge across ops.
    op("fusion.1", "model/dense/MatMul:MatMul", "train.py:10")
    op("fusion.2", "model/dense/MatMul:MatMul", "train.py:10", gap=3000)
    op("fusion.3", "model/dense/BiasAdd:BiasAdd", "train.py:10")
    op("fusion.4", "model/relu/Relu:Relu", "train.py:11")
    # The same op in another step (group) is a new event.
    op("fusion.5", "model/relu/Relu:Relu", "train.py:11", group=2)
    # A stack of scopes of one span: xprof shortens each deeper one by 1 ns more.
    op("fusion.6", "a/b/c/Deep:Deep", "deep.py:1")
    op("fusion.7", "a/b/c/Deep:Deep", "deep.py:1", gap=0)
    # JAX names: with a type, with an empty type (derived from the name), none.
    op("fusion.8", "jit(train)/jvp(mlp)/dot_general:dot_general", "mlp.py:3")
    op("fusion.9", "jit(train)/jvp(mlp)/add_3:", "mlp.py:4")
    op("fusion.10", "jit(train)/transpose[permutation=(1, 0)]:transpose[permutation=(1, 0)]", None)
    op("fusion.11", "jit(f)/jit(main)/dot_general", "f.py:3")
    op("fusion.12", "jit(f)/jit(main)/dot_general", "f.py:3")
    # Memcpy, tf.data and unparsed names; trailing blanks are dropped from the shown name.
    op("copy.1", "MemcpyHToD", None)
    op("iter.1", "Iterator::Prefetch::Map", None)
    op("odd.1", "Some odd op  ", "odd.py:1")
    # An asynchronous event is left out of every derived line.
    op("async.1", "model/async/Send:Send", "async.py:1", **{"_a": 1})
    # tf_op as a reference to a stat metadata's name.
    op("fusion.13", "@model/ref/Ref:Ref", "@ref.py:1")
    # tf_op and source on the event's metadata rather than on the event.
    meta = tpu.metadata("fusion.14", tf_op="model/meta/FromMeta:FromMeta", source="meta.py:9")
    e = ops.events.add()
    e.metadata_id = meta
    e.offset_ps = t * 1000
    e.duration_ps = 400_000
    t += 500
    # Events of a second line interleave with the first in time order.
    other = tpu.line(2, "XLA Ops 2")
    for i in range(3):
        tpu.event(other, f"side.{i}", t + i * 200, 150, tf_op="side/Op:Op", source="side.py:1", group_id=3)
        tpu.event(ops, f"main.{i}", t + i * 200 + 50, 100, tf_op="main/Op:Op", source="main.py:1", group_id=3)
    t += 1000
    # Host offload: overlapping pairs go to separate rows, a done without its start
    # is dropped, and copies not in host memory are not offloads.
    def offload(name, start, dur):
        tpu.event(ops, f"%{name} = f32[8]{{0:S(5)}} {name.split('.')[0]}()", start, dur, display=name)
    offload("copy-start.1", t, 100)
    offload("copy-start.2", t + 150, 100)
    offload("copy-done.1", t + 400, 100)
    offload("copy-done.2", t + 600, 100)
    offload("copy-start.1", t + 800, 50)
    offload("copy-done.1", t + 900, 50)
    offload("dynamic-slice-start.4", t + 1000, 50)
    offload("dynamic-slice-done.4", t + 1200, 50)
    offload("copy-done.9", t + 1300, 50)
    tpu.event(ops, "%copy-start.5 = f32[8]{0} copy-start()", t + 1400, 50, display="copy-start.5")
    tpu.event(ops, "%copy-done.5 = f32[8]{0} copy-done()", t + 1500, 50, display="copy-done.5")
    t += 2000
    # Without a group, an op extends the last one only when it starts at most twice
    # the last one's length after its end.
    tpu.event(ops, "ungrouped.1", t, 100, tf_op="free/Op:Op")
    tpu.event(ops, "ungrouped.2", t + 150, 100, tf_op="free/Op:Op")
    tpu.event(ops, "ungrouped.3", t + 700, 100, tf_op="free/Op:Op")
    tpu.event(ops, "ungrouped.4", t + 3000, 100, tf_op="free/Op:Op")
    t += 4000
    # Of events that start together the shorter is taken first, whatever its line:
    # here it ends the run of the longer one's op.
    tpu.event(ops, "tie.0", t, 100, tf_op="tie/Long:Long", group_id=4)
    tpu.event(ops, "tie.1", t + 200, 500, tf_op="tie/Long:Long", group_id=4)
    tpu.event(other, "tie.2", t + 200, 300, tf_op="tie/Short:Short", group_id=4)
    with open(path, "wb") as f:
        f.write(space.SerializeToString())


def ns(value):
    return int((decimal.Decimal(value) * 1000).to_integral_value(rounding=decimal.ROUND_HALF_EVEN))


def convert(path):
    """Every complete event of xprof's trace-viewer conversion of `path`, as
    [plane, line, name, start ns, duration ns]."""
    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer", {"use_saved_result": False})
    if isinstance(data, bytes):
        data = data.decode()
    doc = json.loads(data, parse_float=decimal.Decimal)
    events = doc["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    threads = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e["name"] == "thread_name"
    }
    return [
        [processes[e["pid"]], threads[(e["pid"], e["tid"])], e["name"], ns(e["ts"]), ns(e.get("dur", 0))]
        for e in events
        if e.get("ph") == "X"
    ]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "derived.xplane.pb")
    build(path)
    print(json.dumps({"path": path, "events": convert(path)}))


if __name__ == "__main__":
    main()
