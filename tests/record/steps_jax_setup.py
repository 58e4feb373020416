"""A JAX program written unlike steps_jax.py: its data and weights come from jitted
helpers JAX runs at set-up (`jax.random.normal` and `uniform`, five calls), its step is
the `update` method of a model class, jitted by `jax.jit` as a method, and one
iteration of its loop sleeps 0.3 s after its call returns. Each iteration of the loop,
the call and whatever follows it, goes to the step log (argv[1]): the step is the loop's
iteration. With argv[2], the program runs its own `jax.profiler.trace(argv[2])` around
the loop (opscope's JAX profiler steps aside: the steps must stay)."""

import functools
import sys
import time

import jax
import jax.numpy as jnp

from steps_log import StepLog

STEPS = 12
SLEEPY = 7


class Regression:
    def __init__(self, key):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        self.x = jax.random.normal(k1, (4096, 512))
        self.w = jax.random.normal(k2, (512, 1024)) * 0.05
        self.v = jax.random.uniform(k3, (1024, 16), minval=-0.1, maxval=0.1)
        self.y = jax.random.normal(k4, (4096, 16))

    @functools.partial(jax.jit, static_argnums=0)
    def update(self, w, v):
        def loss(params):
            w, v = params
            return jnp.mean((jax.nn.gelu(self.x @ w) @ v - self.y) ** 2)

        value, (gw, gv) = jax.value_and_grad(loss)((w, v))
        return w - 0.05 * gw, v - 0.05 * gv, value

    def __hash__(self):
        return id(self)


model = Regression(jax.random.PRNGKey(7))
w, v = model.w, model.v
log = StepLog(sys.argv[1])
trace_dir = sys.argv[2] if len(sys.argv) > 2 else None
if trace_dir:
    jax.profiler.start_trace(trace_dir)
for step in range(STEPS):
    log.begin()
    w, v, value = model.update(w, v)
    value.block_until_ready()
    if step == SLEEPY:
        time.sleep(0.3)
    log.end()
if trace_dir:
    jax.profiler.stop_trace()
print("loss", float(value))
