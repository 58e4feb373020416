"""A jitted JAX function run a few times on the CPU."""

import jax
import jax.numpy as jnp


@jax.jit
def step(x):
    return jnp.tanh(x @ x).sum()


x = jnp.ones((256, 256))
for _ in range(5):
    step(x).block_until_ready()
print("done")
