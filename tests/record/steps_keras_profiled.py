"""A Keras program written unlike steps_keras.py: a 1-D convolutional model on random
sequences, `fit` for 2 epochs of 8 batches with Keras's TensorBoard callback profiling
batches 3 to 6 into argv[2] (the program's own TensorFlow profiler: opscope's steps
aside), and a callback of its own that logs each batch (argv[1]) and sleeps 0.2 s at the
end of batch 10. The steps must be all 16 batches, the sleep in its batch."""

import sys
import time

import numpy as np
import tensorflow as tf

from steps_log import StepLog

BATCH = 128
SLEEPY = 10


class LogBatches(tf.keras.callbacks.Callback):
    def __init__(self, log):
        super().__init__()
        self.log = log
        self.seen = 0

    def on_train_batch_begin(self, batch, logs=None):
        self.log.begin()

    def on_train_batch_end(self, batch, logs=None):
        if self.seen == SLEEPY:
            time.sleep(0.2)
        self.seen += 1
        self.log.end()


model = tf.keras.Sequential([
    tf.keras.layers.Input((64, 24)),
    tf.keras.layers.Conv1D(96, 5, activation="relu"),
    tf.keras.layers.Conv1D(96, 5, activation="relu"),
    tf.keras.layers.GlobalMaxPooling1D(),
    tf.keras.layers.Dense(6),
])
model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.RandomState(3)
x = rng.rand(8 * BATCH, 64, 24).astype("float32")
y = rng.randint(0, 6, 8 * BATCH)
board = tf.keras.callbacks.TensorBoard(sys.argv[2], profile_batch=(3, 6))
model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[LogBatches(StepLog(sys.argv[1])), board])
