"""A small Keras model trained with `model.fit` for 2 epochs on tensorflow-cpu; a
callback writes each batch's start and end to the step log (argv[1]). The layers are
wide enough for steps of about 100 ms: Keras's own Python work around each call of its
train function (about 0.5 ms, in the callback's step but not in TensorFlow's record of
the call) stays well under 1 % of a step. (With 2048-wide layers, steps took 51 ms on
a machine where that work was 0.57 ms: 1.1 %.)"""

import sys

import numpy as np
import tensorflow as tf

from steps_log import StepLog

EPOCHS = 2
STEPS_PER_EPOCH = 6
BATCH = 256


class LogSteps(tf.keras.callbacks.Callback):
    def __init__(self, log):
        super().__init__()
        self.log = log

    def on_train_batch_begin(self, batch, logs=None):
        self.log.begin()

    def on_train_batch_end(self, batch, logs=None):
        self.log.end()


model = tf.keras.Sequential([
    tf.keras.layers.Input((1024,)),
    tf.keras.layers.Dense(3072, activation="relu"),
    tf.keras.layers.Dense(3072, activation="relu"),
    tf.keras.layers.Dense(10),
])
model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x = np.random.RandomState(0).rand(STEPS_PER_EPOCH * BATCH, 1024).astype("float32")
y = np.random.RandomState(1).randint(0, 10, STEPS_PER_EPOCH * BATCH)
model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, callbacks=[LogSteps(StepLog(sys.argv[1]))])
