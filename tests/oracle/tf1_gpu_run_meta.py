"""A TensorFlow 1.x GPU training step as tfprof reads it: writes `run_meta` (a
RunMetadata with FULL_TRACE step stats) and `graph.pbtxt` (its GraphDef) into OUT_DIR,
built with TensorFlow's own protobuf classes.

    python tf1_gpu_run_meta.py OUT_DIR

No GPU is needed: the step is laid out the way TF 1.x's executor and GPU tracer
(device_tracer.cc) wrote it, which this machine cannot record:
  - `/job:localhost/replica:0/task:0/device:CPU:0` and `…/device:GPU:0`: one entry per
    op run, all with thread_id 0, and ops of one device overlapping (inter-op
    parallelism; a histogram summary that outlives the ops started inside it);
  - `/device:GPU:0/stream:N`: each kernel as `node:Op`, and each copy on its own copy
    stream as `node:MEMCPYxxx` (or `node:Op` with the copy in the label);
  - `/device:GPU:0/stream:all`: the kernels of every stream again (the copies are not
    repeated there);
  - `/device:GPU:0/memcpy`: every copy again;
  - feeds and fetches as `_recv_*`/`_send_*` nodes, and the executor's `_SOURCE`,
    which are not in the GraphDef;
  - times in whole microseconds only (TF 1.x had no nanosecond fields), some 0 µs.
The numbers come from a fixed seed, so every run writes the same files.
"""

import os
import random
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from google.protobuf import text_format  # noqa: E402
from tensorflow.core.framework import (  # noqa: E402
    allocation_description_pb2,
    step_stats_pb2,
    tensor_description_pb2,
)
from tensorflow.core.protobuf import config_pb2  # noqa: E402

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
GPU = "/job:localhost/replica:0/task:0/device:GPU:0"
TRACER = "/device:GPU:0"
COMPUTE, COMPUTE_2, H2D, D2H, D2D = 14, 18, 15, 16, 17


def build_graph():
    """A small CNN's training graph, made by TensorFlow itself (graph mode, reference
    variables as in TF 1.x), with summaries on the CPU."""
    import tensorflow as tf

    v1 = tf.compat.v1
    v1.disable_resource_variables()
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/device:CPU:0"), tf.name_scope("input"):
            x = v1.placeholder(tf.float32, [None, 28, 28, 1], name="x")
            y = v1.placeholder(tf.float32, [None, 10], name="y")
        with tf.device("/device:GPU:0"):
            with v1.variable_scope("conv1"):
                w = v1.Variable(tf.zeros([5, 5, 1, 32]), name="weights")
                b = v1.Variable(tf.zeros([32]), name="biases")
                conv = tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")
                conv = tf.nn.relu(tf.nn.bias_add(conv, b))
            with tf.name_scope("pool1"):
                pool = tf.nn.max_pool2d(conv, 2, 2, "SAME")
            with tf.name_scope("fc"):
                fw = v1.Variable(tf.zeros([14 * 14 * 32, 10]), name="weights")
                fb = v1.Variable(tf.zeros([10]), name="biases")
                logits = tf.matmul(tf.reshape(pool, [-1, 14 * 14 * 32]), fw) + fb
            with tf.name_scope("loss"):
                loss = tf.reduce_mean(
                    tf.nn.softmax_cross_entropy_with_logits(
                        labels=y, logits=logits, name="xentropy"
                    )
                )
            with tf.name_scope("accuracy"):
                right = tf.equal(tf.argmax(logits, 1), tf.argmax(y, 1))
                tf.reduce_mean(tf.cast(right, tf.float32))
            v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        with tf.device("/device:CPU:0"), tf.name_scope("summaries"):
            v1.summary.merge(
                [
                    v1.summary.histogram("conv1_weights", w),
                    v1.summary.histogram("fc_weights", fw),
                    v1.summary.scalar("loss", loss),
                ]
            )
    return graph.as_graph_def()


class Step:
    """Collects node stats per device, in the order TF 1.x lists its devices."""

    def __init__(self, t0):
        self.t0 = t0
        self.devices = {}
        for d in [CPU, GPU, TRACER + "/stream:all"]:
            self.devices[d] = []

    def entry(self, device, node_name, start, dur, label, all_end_extra=0):
        ns = step_stats_pb2.NodeExecStats()
        ns.node_name = node_name
        ns.all_start_micros = self.t0 + start
        ns.op_start_rel_micros = 0
        ns.op_end_rel_micros = dur
        ns.all_end_rel_micros = dur + all_end_extra
        ns.timeline_label = label
        ns.thread_id = 0
        self.devices.setdefault(device, []).append(ns)
        return ns

    def op(self, device, name, op, start, dur, inputs=(), allocated=0, out_bytes=0):
        """An op run by the executor (all_end_rel adds its post-processing)."""
        label = "%s = %s(%s)" % (name, op, ", ".join(inputs))
        ns = self.entry(device, name, start, dur, label, all_end_extra=2)
        if allocated:
            mem = ns.memory.add()
            mem.allocator_name = "GPU_0_bfc" if device == GPU else "cpu"
            mem.total_bytes = allocated
            mem.peak_bytes = allocated
            mem.live_bytes = out_bytes
            mem.allocator_bytes_in_use = 1 << 24
        if out_bytes:
            out = ns.output.add()
            out.slot = 0
            out.tensor_description.CopyFrom(
                tensor_description_pb2.TensorDescription(
                    allocation_description=allocation_description_pb2.AllocationDescription(
                        requested_bytes=out_bytes,
                        allocated_bytes=out_bytes,
                        allocator_name=mem.allocator_name if allocated else "cpu",
                    )
                )
            )
        return ns

    def kernel(self, name, op, start, dur, kernel_name, stream=COMPUTE):
        """A kernel: on its stream, and again on `stream:all`."""
        for device in [TRACER + "/stream:%d" % stream, TRACER + "/stream:all"]:
            self.entry(device, "%s:%s" % (name, op), start, dur, kernel_name)

    def copy(self, node_name, start, dur, direction, nbytes, stream):
        """A copy: on its copy stream and on the memcpy lane, not on `stream:all`."""
        label = "MEMCPY%s %d bytes" % (direction, nbytes)
        for device in [TRACER + "/memcpy", TRACER + "/stream:%d" % stream]:
            self.entry(device, node_name, start, dur, label)


def build_step(graph_def):
    rng = random.Random(21)
    step = Step(1_511_000_000_000_000)
    nodes = {n.name: n for n in graph_def.node}

    def jitter(us):
        return max(0, us + rng.randint(-(us // 10), us // 10))

    def graph_op(name, start, dur, allocated=0, out_bytes=0, exact=False):
        node = nodes[name]  # a KeyError here: the graph changed its names
        device = CPU if "CPU" in node.device else GPU
        inputs = [i for i in node.input if not i.startswith("^")]
        dur = dur if exact else jitter(dur)
        return step.op(device, name, node.op, start, dur, inputs, allocated, out_bytes)

    def kernel(name, start, dur, kernel_name, stream=COMPUTE):
        step.kernel(name, nodes[name].op, start, jitter(dur), kernel_name, stream)

    op, copy = step.op, step.copy
    # The executor starts both devices at their _SOURCE (not in the GraphDef).
    op(CPU, "_SOURCE", "NoOp", 0, 8)
    op(GPU, "_SOURCE", "NoOp", 3, 14)
    # Feeds arrive on the CPU and are copied to the GPU.
    op(CPU, "_recv_input/x_0", "_Recv", 20, jitter(35), out_bytes=401408)
    op(CPU, "_recv_input/y_0", "_Recv", 24, jitter(6), out_bytes=5120)
    copy("edge_7__recv_input/x_0:MEMCPYHtoD", 70, jitter(108), "HtoD", 401408, H2D)
    copy("edge_9__recv_input/y_0:MEMCPYHtoD", 74, 1, "HtoD", 5120, H2D)
    # Variables and constants: tiny, several at once on the one thread id.
    t = 30
    for name in ["conv1/weights", "conv1/biases", "fc/weights", "fc/biases"]:
        graph_op(name, t, 6)
        graph_op(name + "/read", t + 4, 3)
        t += 9
    for name in ["fc/Reshape/shape", "loss/Const", "accuracy/ArgMax/dimension",
                 "accuracy/ArgMax_1/dimension", "train/learning_rate"]:
        graph_op(name, t, 0, allocated=256, out_bytes=256, exact=True)
        t += 1
    # Forward pass. Conv2D's host time is long (cuDNN picks its algorithm); BiasAdd is
    # enqueued while Conv2D is still in Compute, and outlives it.
    graph_op("conv1/Conv2D", 190, 950, allocated=3211264, out_bytes=3211264)
    kernel("conv1/Conv2D", 420, 60, "cudnn::detail::implicit_convolve_sgemm")
    kernel("conv1/Conv2D", 485, 1240, "maxwell_scudnn_128x64_relu_interior_nn")
    graph_op("conv1/BiasAdd", 1100, 70, allocated=3211264, out_bytes=3211264)
    kernel("conv1/BiasAdd", 1730, 95, "BiasNCHWKernel")
    graph_op("conv1/Relu", 1185, 22, allocated=3211264, out_bytes=3211264)
    kernel("conv1/Relu", 1830, 80, "Eigen::internal::EigenMetaKernel<relu>")
    graph_op("pool1/MaxPool2d", 1212, 31, allocated=802816, out_bytes=802816)
    kernel("pool1/MaxPool2d", 1915, 140, "cudnn::detail::pooling_fw_4d_kernel")
    graph_op("fc/Reshape", 1248, 4)
    graph_op("fc/MatMul", 1256, 45, allocated=40960, out_bytes=40960)
    kernel("fc/MatMul", 2060, 410, "maxwell_sgemm_128x64_nn")
    # fc/add starts inside MatMul's host time and ends after it.
    graph_op("fc/add", 1290, 40, allocated=40960, out_bytes=40960)
    kernel("fc/add", 2475, 12, "Eigen::internal::EigenMetaKernel<sum>")
    for i, name in enumerate(["loss/xentropy/Shape", "loss/xentropy/Shape_1",
                              "loss/xentropy/Reshape", "loss/xentropy/Reshape_1"]):
        graph_op(name, 1296 + 6 * i, 4)
    graph_op("loss/xentropy", 1335, 38, allocated=41472, out_bytes=512)
    kernel("loss/xentropy", 2490, 25, "Eigen::internal::EigenMetaKernel<softmax>")
    kernel("loss/xentropy", 2517, 9, "Eigen::internal::EigenMetaKernel<xent>")
    graph_op("loss/xentropy/Reshape_2", 1376, 3)
    # The accuracy branch runs beside the loss on the same thread id: ArgMax holds
    # Equal and Cast, and Mean crosses loss/Mean.
    graph_op("accuracy/ArgMax", 1340, 60, allocated=1024, out_bytes=1024)
    kernel("accuracy/ArgMax", 2530, 18, "ArgMaxKernel", stream=COMPUTE_2)
    graph_op("accuracy/ArgMax_1", 1342, 12, allocated=1024, out_bytes=1024)
    kernel("accuracy/ArgMax_1", 2550, 16, "ArgMaxKernel", stream=COMPUTE_2)
    graph_op("accuracy/Equal", 1356, 9, allocated=128, out_bytes=128)
    kernel("accuracy/Equal", 2568, 4, "EigenMetaKernel<equal>", stream=COMPUTE_2)
    graph_op("accuracy/Cast", 1367, 0, allocated=512, out_bytes=512, exact=True)
    kernel("accuracy/Cast", 2573, 3, "EigenMetaKernel<cast>", stream=COMPUTE_2)
    graph_op("loss/Mean", 1380, 30, allocated=4, out_bytes=4)
    kernel("loss/Mean", 2530, 14, "ReduceKernel")
    graph_op("accuracy/Mean", 1395, 26, allocated=4, out_bytes=4)
    kernel("accuracy/Mean", 2578, 10, "ReduceKernel", stream=COMPUTE_2)
    # Backward pass.
    t = 1425
    for name in ["gradients/grad_ys_0", "gradients/loss/Mean_grad/Reshape",
                 "gradients/loss/Mean_grad/Tile", "gradients/loss/Mean_grad/truediv",
                 "gradients/loss/xentropy/Reshape_2_grad/Reshape",
                 "gradients/loss/xentropy_grad/ExpandDims",
                 "gradients/loss/xentropy_grad/mul",
                 "gradients/loss/xentropy/Reshape_grad/Reshape"]:
        graph_op(name, t, 5, allocated=512, out_bytes=512)
        if nodes[name].op in ("Fill", "Tile", "RealDiv", "Mul"):
            kernel(name, 2550 + (t - 1425) * 2, 5, "EigenMetaKernel")
        t += 6
    graph_op("gradients/fc/add_grad/Sum", 1476, 28, allocated=40, out_bytes=40)
    kernel("gradients/fc/add_grad/Sum", 2650, 11, "ColumnReduceKernel")
    graph_op("gradients/fc/add_grad/Reshape", 1506, 3)
    graph_op("gradients/fc/MatMul_grad/MatMul", 1480, 52, allocated=802816,
             out_bytes=802816)
    kernel("gradients/fc/MatMul_grad/MatMul", 2665, 380, "maxwell_sgemm_128x64_nt")
    graph_op("gradients/fc/MatMul_grad/MatMul_1", 1500, 48, allocated=802816,
             out_bytes=802816)
    kernel("gradients/fc/MatMul_grad/MatMul_1", 3050, 395, "maxwell_sgemm_128x64_tn")
    graph_op("gradients/fc/Reshape_grad/Reshape", 1552, 3)
    graph_op("gradients/pool1/MaxPool2d_grad/MaxPoolGrad", 1558, 41,
             allocated=3211264, out_bytes=3211264)
    kernel("gradients/pool1/MaxPool2d_grad/MaxPoolGrad", 3450, 310,
           "cudnn::detail::pooling_bw_kernel_max")
    graph_op("gradients/conv1/Relu_grad/ReluGrad", 1603, 19, allocated=3211264,
             out_bytes=3211264)
    kernel("gradients/conv1/Relu_grad/ReluGrad", 3765, 90, "EigenMetaKernel<relu_grad>")
    graph_op("gradients/conv1/BiasAdd_grad/BiasAddGrad", 1626, 35, allocated=128,
             out_bytes=128)
    kernel("gradients/conv1/BiasAdd_grad/BiasAddGrad", 3860, 70,
           "BiasGradNCHW_SharedAtomics", stream=COMPUTE_2)
    graph_op("gradients/conv1/Conv2D_grad/ShapeN", 1628, 6)
    graph_op("gradients/conv1/Conv2D_grad/Conv2DBackpropFilter", 1636, 640,
             allocated=12800 + (4 << 20), out_bytes=12800)
    kernel("gradients/conv1/Conv2D_grad/Conv2DBackpropFilter", 3870, 25,
           "cudnn::detail::wgrad_alg0_engine_prep")
    kernel("gradients/conv1/Conv2D_grad/Conv2DBackpropFilter", 3900, 980,
           "cudnn::detail::wgrad_alg0_engine")
    # Updates, two of them crossing each other.
    t = 2290
    for name, dur, kdur in [
        ("train/update_fc/biases/ApplyGradientDescent", 11, 3),
        ("train/update_fc/weights/ApplyGradientDescent", 24, 28),
        ("train/update_conv1/biases/ApplyGradientDescent", 9, 3),
        ("train/update_conv1/weights/ApplyGradientDescent", 13, 4),
    ]:
        graph_op(name, t, dur)
        kernel(name, 4890 + (t - 2290) * 4, kdur, "EigenMetaKernel<sgd>")
        t += 10
    # An op's own device-to-device copy, named with its op type (as TF 1.x did).
    for device in [TRACER + "/memcpy", TRACER + "/stream:%d" % D2D]:
        step.entry(device, "gradients/fc/add_grad/Reshape:Reshape", 2660, 2,
                   "MEMCPYDtoD 40 bytes")
    graph_op("train", 2345, 2)
    # Fetches and summaries: the loss and the weights go back to the host; the
    # histograms take long on the CPU, the scalar summary and the fetch run inside
    # the first, and the second histogram outlives it.
    copy("edge_31_conv1/weights/read:MEMCPYDtoH", 440, 2, "DtoH", 3200, D2H)
    copy("edge_33_fc/weights/read:MEMCPYDtoH", 450, jitter(95), "DtoH", 250880, D2H)
    copy("edge_35_loss/Mean:MEMCPYDtoH", 2550, 1, "DtoH", 4, D2H)
    for i, name in enumerate(["summaries/conv1_weights/tag", "summaries/fc_weights/tag",
                              "summaries/loss/tags"]):
        graph_op(name, 36 + i, i % 2, allocated=64, out_bytes=64, exact=True)
    graph_op("summaries/conv1_weights", 460, 18244, allocated=2048, out_bytes=1310,
             exact=True)
    graph_op("summaries/fc_weights", 600, 21310, allocated=2048, out_bytes=1408)
    graph_op("summaries/loss", 2560, 14, allocated=96, out_bytes=96)
    op(CPU, "_send_loss/Mean_0", "_Send", 2580, 9)
    graph_op("summaries/Merge/MergeSummary", 21990, 37, allocated=2900, out_bytes=2900)
    op(CPU, "_send_summaries/Merge/MergeSummary_0", "_Send", 22030, 4)
    return step


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    graph_def = build_graph()
    step = build_step(graph_def)
    run_meta = config_pb2.RunMetadata()
    for device, nodes in step.devices.items():
        dev = run_meta.step_stats.dev_stats.add()
        dev.device = device
        dev.node_stats.extend(nodes)
    with open(os.path.join(out_dir, "run_meta"), "wb") as f:
        f.write(run_meta.SerializeToString())
    with open(os.path.join(out_dir, "graph.pbtxt"), "w") as f:
        f.write(text_format.MessageToString(graph_def))


if __name__ == "__main__":
    main()
