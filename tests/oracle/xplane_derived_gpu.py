"""xprof as the oracle of the lines its trace viewer derives for a GPU plane.

Builds an XSpace with the XSpace protobuf classes: a host plane and two
`/device:GPU:N` planes whose streams hold kernels (events with `kernel_details`) and
memcpys carrying the stats xprof derives lines from: `hlo_module` (and `program_id`),
`hlo_op` (levels separated by `::`), `tf_op`, `group_id`, as strings or references, on
the event or (ignored by xprof) on its metadata, plus `source` and `correlation_id`,
which xprof does not derive GPU lines from. Then runs xprof's own trace-viewer
conversion on it (`xspace_to_tool_data(..., "trace_viewer", ...)`) and prints one JSON
line: the XPlane's path and every complete event of xprof's output as [plane, line,
name, start ns, duration ns].

Usage: xplane_derived_gpu.py OUT_DIR   (writes OUT_DIR/derived_gpu.xplane.pb)
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xplane_derived import Plane, convert  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

KERNEL = "regs:32 shm:0 grid:1,1,1 block:128,1,1"


class Stream:
    """One stream line; events follow each other from `t` unless told where."""

    def __init__(self, plane, line_id, name, t=1000):
        self.plane = plane
        self.line = plane.line(line_id, name)
        self.t = t
        self.n = 0

    def kernel(self, dur=500, gap=100, kernel=True, **stats):
        if kernel:
            stats.setdefault("kernel_details", KERNEL)
        self.n += 1
        self.plane.event(self.line, f"kernel_{self.line.id}_{self.n}", self.t, dur, **stats)
        self.t += dur + gap


def xla_stream(gpu):
    s = Stream(gpu, 7, "Stream #7(Compute)")
    # One op over several kernels, nested in a while loop, across a gap.
    s.kernel(hlo_op="while.1::fusion.1", hlo_module="jit_train", group_id=1, correlation_id=1)
    s.kernel(hlo_op="while.1::fusion.1", hlo_module="jit_train", group_id=1, gap=3000)
    s.kernel(hlo_op="while.1::fusion.2", hlo_module="jit_train", group_id=1, source="t.py:3")
    # A stack of one span: xprof shortens each deeper level by 1 ns more.
    s.kernel(hlo_op="cond.1::call.2::fusion.3", hlo_module="jit_train", group_id=1)
    s.kernel(hlo_op="fusion.4", hlo_module="jit_train", group_id=1, gap=0)
    # A module with a program id; a kernel without a group joins the latest one.
    s.kernel(hlo_op="fusion.1", hlo_module="jit_eval", program_id=42, group_id=1)
    s.kernel(hlo_op="fusion.1", hlo_module="jit_eval", program_id=42)
    # The next step: the same op is a new event.
    s.kernel(hlo_op="fusion.1", hlo_module="jit_eval", program_id=42, group_id=2)
    # Only a module; then an op without one; a framework op on an XLA kernel is not
    # derived from the kernel's stat.
    s.kernel(hlo_module="jit_other", group_id=2)
    s.kernel(hlo_op="fusion.9", group_id=2)
    s.kernel(hlo_op="fusion.10", hlo_module="jit_other", tf_op="m/d/MatMul:MatMul", group_id=2)
    # A new module ends the op open in the one before, even of the same name.
    s.kernel(hlo_op="fusion.10", hlo_module="jit_other", group_id=2)
    s.kernel(hlo_module="jit_third", group_id=2)
    s.kernel(hlo_op="fusion.10", hlo_module="jit_other", group_id=2)
    # Not a kernel (no kernel_details): no op line.
    s.kernel(hlo_op="fusion.11", hlo_module="jit_other", group_id=2, kernel=False)
    # References to stat metadata names.
    s.kernel(hlo_op="@fusion.12", hlo_module="@jit_ref", kernel_details="@" + KERNEL, group_id=2)
    # Stats on the metadata only: xprof derives nothing from them.
    meta = gpu.metadata("kernel_meta", hlo_op="fusion.13", hlo_module="jit_meta",
                        tf_op="meta/Op:Op", kernel_details=KERNEL)
    e = s.line.events.add()
    e.metadata_id = meta
    e.offset_ps = s.t * 1000
    e.duration_ps = 300_000
    s.t += 400
    # A stack left open at the end is not shortened.
    s.kernel(hlo_op="a.1::b.2", hlo_module="jit_end", group_id=2)
    return s


def tf_stream(gpu):
    s = Stream(gpu, 9, "Stream #9(Compute)", t=1200)
    # TensorFlow ops: runs of one op merge across gaps, scopes nest.
    s.kernel(tf_op="model/dense/MatMul:MatMul", group_id=1, dur=300)
    s.kernel(tf_op="model/dense/MatMul:MatMul", group_id=1, dur=300, gap=2000)
    s.kernel(tf_op="model/dense/BiasAdd:BiasAdd", group_id=1, dur=300)
    s.kernel(tf_op="model/relu/Relu:Relu", group_id=1, dur=300)
    # JAX names, a memcpy op, an unparsed name, a reference.
    s.kernel(tf_op="jit(step)/jvp(mlp)/dot_general:dot_general", group_id=2, dur=300)
    s.kernel(tf_op="jit(step)/jvp(mlp)/add_3:", group_id=2, dur=300)
    s.kernel(tf_op="MemcpyHToD", group_id=2, dur=300)
    s.kernel(tf_op="Some odd op", group_id=2, dur=300)
    s.kernel(tf_op="@ref/scope/Ref:Ref", group_id=2, dur=300)
    # A stack of one span, closed by the next op.
    s.kernel(tf_op="a/b/c/Deep:Deep", group_id=2, dur=300)
    s.kernel(tf_op="x/Other:Other", group_id=2, dur=300)
    return s


def memcpy_stream(gpu):
    s = Stream(gpu, 11, "Stream #11(MemcpyH2D)", t=1100)
    # Copies: not kernels, so no op lines, but their groups make steps.
    for group in (1, 1, 3, 2):
        s.kernel(kernel=False, hlo_op="copy.1", hlo_module="jit_train", group_id=group,
                 memcpy_details="size:64 dest:0 async:1", dur=200, gap=900)
    return s


def build(path):
    space = xplane_pb2.XSpace()
    space.hostnames.append("oracle-host")
    host = Plane(space, 0, "/host:CPU")
    host.event(host.line(1, "python"), "train_step", 0, 200_000)
    gpu = Plane(space, 1, "/device:GPU:0")
    xla_stream(gpu)
    tf_stream(gpu)
    memcpy_stream(gpu)
    # A second device, its stream of the same id.
    other = Plane(space, 2, "/device:GPU:1")
    s = Stream(other, 7, "Stream #7(Compute)", t=500)
    s.kernel(hlo_op="fusion.1", hlo_module="jit_train", group_id=5)
    s.kernel(hlo_op="fusion.2", hlo_module="jit_train", group_id=5)
    s.kernel(tf_op="n/Op:Op")
    with open(path, "wb") as f:
        f.write(space.SerializeToString())


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "derived_gpu.xplane.pb")
    build(path)
    print(json.dumps({"path": path, "events": convert(path)}))


if __name__ == "__main__":
    main()
