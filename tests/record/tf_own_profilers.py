"""A TensorFlow program that runs its own profilers: Keras's TensorBoard callback
profiling batches 2 to 4 of `fit`, then `tf.profiler.experimental.start/stop` around
one more `fit`. Prints, as JSON, the XPlane files they wrote under OUT (argv[1]), each
with how many of its events are TensorFlow ops: the same, with or without opscope
record."""

import json
import os
import sys

import numpy as np
import tensorflow as tf

OUT = sys.argv[1]
model = tf.keras.Sequential([
    tf.keras.layers.Input((16,)),
    tf.keras.layers.Dense(32, activation="relu"),
    tf.keras.layers.Dense(4),
])
model.compile(optimizer="sgd", loss="mse")
x = np.random.RandomState(0).rand(256, 16).astype("float32")
y = np.random.RandomState(1).rand(256, 4).astype("float32")

board = tf.keras.callbacks.TensorBoard(os.path.join(OUT, "board"), profile_batch=(2, 4))
model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[board])

tf.profiler.experimental.start(os.path.join(OUT, "manual"))
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
tf.profiler.experimental.stop()

with tf.profiler.experimental.Profile(os.path.join(OUT, "context")):
    model.predict(x, verbose=0)

files = {}
for root, _, names in os.walk(OUT):
    for name in names:
        if name.endswith(".xplane.pb"):
            # The run directory is named after the time it started.
            files[os.path.relpath(root, OUT).split(os.sep)[0]] = files.get(
                os.path.relpath(root, OUT).split(os.sep)[0], 0) + 1
print(json.dumps({"xplanes": files}, sort_keys=True))
