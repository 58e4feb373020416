"""A JAX training loop on the CPU for the record benchmark (bench/record.py --task jax):
a jitted MLP step on random data, --steps times, each step's time taken around the call
and the wait for its result. Prints one JSON line: the step times (ms) and the wall
time from the program's first line to its last (s). With --profile DIR, the whole run is
inside `jax.profiler.trace(DIR)` with JAX's default options (its Python tracer on), as a
program that profiles itself runs."""

import argparse
import contextlib
import json
import time

START = time.perf_counter()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=120)
parser.add_argument("--profile", metavar="DIR")
args = parser.parse_args()


def loss(params, x, y):
    w1, w2 = params
    return jnp.mean((jax.nn.relu(x @ w1) @ w2 - y) ** 2)


@jax.jit
def step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return [p - 1e-3 * g for p, g in zip(params, grads)]


with jax.profiler.trace(args.profile) if args.profile else contextlib.nullcontext():
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    params = [jax.random.normal(k1, (1024, 1024)) * 0.03, jax.random.normal(k2, (1024, 64)) * 0.03]
    x = jax.random.normal(k3, (2048, 1024))
    y = jnp.zeros((2048, 64))
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        params = step(params, x, y)
        jax.block_until_ready(params)
        times.append((time.perf_counter() - t) * 1e3)
print(json.dumps({"steps_ms": times, "wall_s": time.perf_counter() - START}))
