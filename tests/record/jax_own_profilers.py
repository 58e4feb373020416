"""A JAX program that takes its own profiles: `jax.profiler.trace` around three steps,
then `start_trace`/`stop_trace` around three more. Prints, as JSON, how many XPlane
files each wrote under OUT (argv[1]): the same, with or without opscope record."""

import json
import os
import sys

import jax
import jax.numpy as jnp

OUT = sys.argv[1]


@jax.jit
def step(x):
    return jnp.tanh(x @ x).sum()


x = jnp.ones((128, 128))
step(x).block_until_ready()
with jax.profiler.trace(os.path.join(OUT, "context")):
    for _ in range(3):
        step(x).block_until_ready()
for _ in range(3):
    step(x).block_until_ready()
jax.profiler.start_trace(os.path.join(OUT, "manual"))
for _ in range(3):
    step(x).block_until_ready()
jax.profiler.stop_trace()
for _ in range(3):
    step(x).block_until_ready()

files = {}
for root, _, names in os.walk(OUT):
    for name in names:
        if name.endswith(".xplane.pb"):
            top = os.path.relpath(root, OUT).split(os.sep)[0]
            files[top] = files.get(top, 0) + 1
print(json.dumps({"xplanes": files}, sort_keys=True))
