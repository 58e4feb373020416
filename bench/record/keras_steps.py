"""Times the training steps of a small Keras CNN (tensorflow-cpu, random data), for
bench/record.py: a custom loop around a tf.function train step, WARMUP untimed steps,
then STEPS steps each timed with perf_counter. Prints {"steps_ms": [...], "faults":
[...]} (the minor page faults of each timed step) as JSON.
One compute thread by default, for the reason torch_steps.py gives.

    python keras_steps.py [--steps 20] [--warmup 5] [--threads 1]
"""

import argparse
import json
import resource
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--threads", type=int, default=1)
args = parser.parse_args()
tf.config.threading.set_intra_op_parallelism_threads(args.threads)
tf.config.threading.set_inter_op_parallelism_threads(args.threads)

tf.keras.utils.set_random_seed(0)
model = tf.keras.Sequential([
    tf.keras.layers.Input((32, 32, 3)),
    tf.keras.layers.Conv2D(32, 3, activation="relu"),
    tf.keras.layers.MaxPooling2D(),
    tf.keras.layers.Conv2D(64, 3, activation="relu"),
    tf.keras.layers.MaxPooling2D(),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(128, activation="relu"),
    tf.keras.layers.Dense(10),
])
optimizer = tf.keras.optimizers.SGD(0.01)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
x = tf.constant(np.random.RandomState(0).rand(64, 32, 32, 3).astype("float32"))
y = tf.constant(np.random.RandomState(1).randint(0, 10, 64))


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


steps_ms = []
faults = []  # minor page faults of each timed step
for step in range(args.warmup + args.steps):
    faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    train_step(x, y).numpy()  # .numpy() waits for the step's result
    if step >= args.warmup:
        steps_ms.append((time.perf_counter() - start) * 1e3)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before)
print(json.dumps({"steps_ms": steps_ms, "faults": faults}))
