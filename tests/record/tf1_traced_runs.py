"""A TF 1.x-style program that asks TensorFlow for its own trace of some runs:
`Session.run(..., options=RunOptions(trace_level=FULL_TRACE), run_metadata=rm)` in
a loop, untraced runs between, and a callable made with tracing options. Prints, as
JSON, the ops each traced run's RunMetadata holds: the same with or without opscope
record, whose TensorFlow profiler must step aside for these runs (TensorFlow refuses
a traced run while another profiler session is active)."""

import json
import sys

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_eager_execution()
graph = tf.Graph()
with graph.as_default():
    images = tf.compat.v1.placeholder(tf.float32, [None, 12, 12, 2], name="images")
    kernel = tf.Variable(tf.random.normal([3, 3, 2, 4], seed=1), name="kernel")
    conv = tf.nn.conv2d(images, kernel, strides=1, padding="SAME", name="conv")
    pooled = tf.reduce_mean(tf.nn.sigmoid(conv), axis=[1, 2], name="pooled")
    score = tf.reduce_max(pooled, name="score")
    init = tf.compat.v1.global_variables_initializer()

batch = np.linspace(0, 1, 8 * 12 * 12 * 2, dtype=np.float32).reshape(8, 12, 12, 2)
full = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
seen = {}


def ops_of(metadata):
    names = set()
    for device in metadata.step_stats.dev_stats:
        for node in device.node_stats:
            names.add(node.node_name.split(":")[0])
    # Only the graph's own ops: the executor adds bookkeeping nodes of its own.
    return sorted(n for n in names if n in ("conv", "pooled", "score", "kernel"))


with tf.compat.v1.Session(graph=graph) as session:
    session.run(init)
    for step in range(6):
        feed = {images: batch * (step + 1)}
        if step % 3 == 2:
            session.run(score, feed)  # untraced: opscope's profiler comes back
            continue
        metadata = tf.compat.v1.RunMetadata()
        session.run(score, feed, options=full, run_metadata=metadata)
        seen["run %d" % step] = ops_of(metadata)
    # A callable made with tracing options traces each of its calls.
    from tensorflow.core.protobuf import config_pb2

    options = config_pb2.CallableOptions()
    options.feed.append(images.name)
    options.fetch.append(score.name)
    options.run_options.trace_level = tf.compat.v1.RunOptions.FULL_TRACE
    traced_callable = session._make_callable_from_options(options)
    metadata = tf.compat.v1.RunMetadata()
    traced_callable(batch, run_metadata=metadata)
    seen["callable"] = ops_of(metadata)
print(json.dumps({"traced": seen}, sort_keys=True))
