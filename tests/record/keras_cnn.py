"""A small Keras CNN trained on random data for one epoch on tensorflow-cpu."""

import numpy as np
import tensorflow as tf

model = tf.keras.Sequential([
    tf.keras.layers.Input((28, 28, 1)),
    tf.keras.layers.Conv2D(8, 3, activation="relu"),
    tf.keras.layers.MaxPooling2D(),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(10),
])
model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x = np.random.RandomState(0).rand(256, 28, 28, 1).astype("float32")
y = np.random.RandomState(1).randint(0, 10, 256)
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
print("trained")
