"""A JAX program that profiles itself in sessions: an MLP's jitted SGD step, a helper
warmed before the loop, then one `jax.profiler` session per batch size given (argv[2],
comma-separated), each of 6 steps marked with `StepTraceAnnotation`, into the log
directory argv[1]. Each session is a run of the log directory (a file of its own)."""

import sys
import time

import jax
import jax.numpy as jnp

logdir, batches = sys.argv[1], [int(b) for b in sys.argv[2].split(",")]


def forward(params, x):
    for w, b in params[:-1]:
        x = jax.nn.gelu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss(params, x, y):
    return jnp.mean((forward(params, x) - y) ** 2)


@jax.jit
def update(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return [(w - 1e-3 * gw, b - 1e-3 * gb) for (w, b), (gw, gb) in zip(params, grads)]


def evaluate(params, x, y):
    return float(jax.jit(loss)(params, x, y))


key = jax.random.PRNGKey(0)
params = []
for a, b in zip([256, 512, 512], [512, 512, 10]):
    key, k = jax.random.split(key)
    params.append((jax.random.normal(k, (a, b)) * 0.05, jnp.zeros(b)))
evaluate(params, jnp.ones((8, 256)), jnp.zeros((8, 10)))
step = 0
for batch in batches:
    x = jax.random.normal(key, (batch, 256))
    y = jnp.zeros((batch, 10))
    update(params, x, y)  # compiled outside the profile
    jax.profiler.start_trace(logdir)
    for _ in range(6):
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            params = update(params, x, y)
            jax.block_until_ready(params)
        step += 1
    jax.profiler.stop_trace()
    # A profile run is named by the second it starts in.
    time.sleep(1.1)
