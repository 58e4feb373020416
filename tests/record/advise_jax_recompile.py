"""A JAX training loop for `opscope advise`'s recompilation rule, written fresh: a
jitted step over batches whose size changes every step when run with `grow` (so XLA
compiles the step again each time), or stays the same without it.

    python advise_jax_recompile.py [grow] [PROFILE_DIR]

With PROFILE_DIR, the loop runs under the program's own `jax.profiler.trace`.
"""

import sys

import jax
import jax.numpy as jnp


def loss(w, x, y):
    return jnp.mean((x @ w - y) ** 2)


@jax.jit
def step(w, x, y):
    g = jax.grad(loss)(w, x, y)
    return w - 0.01 * g


def main():
    grow = "grow" in sys.argv[1:]
    profile = [a for a in sys.argv[1:] if a != "grow"]
    key = jax.random.PRNGKey(0)
    w = jax.random.normal(key, (256, 64))

    def loop():
        nonlocal w
        for i in range(12):
            n = 64 + (8 * i if grow else 0)
            x = jnp.ones((n, 256)) * (i + 1)
            y = jnp.ones((n, 64))
            w = step(w, x, y)
            w.block_until_ready()

    if profile:
        with jax.profiler.trace(profile[0]):
            loop()
    else:
        loop()


if __name__ == "__main__":
    main()
