"""A neural ODE trained the way Diffrax's neural-ODE example trains one, with the solvers written out:
an MLP vector field, gradients through a fixed-step Heun solver (``jax.lax.scan``), and the updated
model's error measured by an adaptive Heun solver inside ``jax.lax.while_loop`` (so each execution
runs a data-dependent number of solver steps); a jitted ``make_step`` (loss, grads, optax update,
error) called from one line of a loop over training stages. ``make_step`` compiles again twice, as
Diffrax's does: at step 1, once, the learning-rate scale arrives as a Python float (a weak type)
instead of an f32 array, and when the second stage trains on a longer time series (a new shape).

    python node.py STEPS_STAGE1 STEPS_STAGE2
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

WIDTH, DIM, BATCH = 32, 2, 16


def init_mlp(key):
    k1, k2, k3 = jax.random.split(key, 3)
    return {"w1": jax.random.normal(k1, (DIM, WIDTH)) * 0.3, "w2": jax.random.normal(k2, (WIDTH, WIDTH)) * 0.1,
            "w3": jax.random.normal(k3, (WIDTH, DIM)) * 0.1}


def field(params, y):
    h = jax.nn.softplus(y @ params["w1"])
    h = jax.nn.softplus(h @ params["w2"])
    return jnp.tanh(h @ params["w3"])


def solve_fixed(params, y0, ts, substeps=2):
    """y at each of ``ts``: ``substeps`` Heun steps between consecutive times (differentiable)."""

    def to_next(y, t_pair):
        dt = (t_pair[1] - t_pair[0]) / substeps

        def heun(y, _):
            k1 = field(params, y)
            return y + 0.5 * dt * (k1 + field(params, y + dt * k1)), None

        y, _ = jax.lax.scan(heun, y, None, length=substeps)
        return y, y

    _, ys = jax.lax.scan(to_next, y0, (ts[:-1], ts[1:]))
    return jnp.concatenate([y0[None], ys])


def solve(params, y0, ts):
    """y at each of ``ts``: adaptive steps (Heun's error estimate) between consecutive times."""

    def to_next(y, t_pair):
        t0, t1 = t_pair

        def cond(c):
            return c[0] < t1

        def body(c):
            t, y, dt = c
            dt = jnp.minimum(dt, t1 - t)
            k1 = field(params, y)
            k2 = field(params, y + dt * k1)
            y_new = y + 0.5 * dt * (k1 + k2)
            err = jnp.max(jnp.abs(0.5 * dt * (k2 - k1)))
            ok = err < 1e-3
            return jnp.where(ok, t + dt, t), jnp.where(ok, y_new, y), dt * jnp.clip(0.9 * (1e-3 / (err + 1e-12)) ** 0.5,
                                                                                    0.2, 5.0)

        _, y, _ = jax.lax.while_loop(cond, body, (t0, y, jnp.asarray(0.05, y.dtype)))
        return y, y

    _, ys = jax.lax.scan(to_next, y0, (ts[:-1], ts[1:]))
    return jnp.concatenate([y0[None], ys])


optim = optax.adabelief(3e-3)


@jax.jit
def make_step(params, opt_state, ts, ys, lr_scale):
    def loss(params):
        pred = jax.vmap(lambda y0: solve_fixed(params, y0, ts))(ys[:, 0])
        return jnp.mean((pred - ys) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = optim.update(grads, opt_state, params)
    updates = jax.tree.map(lambda u: u * lr_scale, updates)
    params = optax.apply_updates(params, updates)
    error = jnp.mean((jax.vmap(lambda y0: solve(params, y0, ts))(ys[:, 0]) - ys) ** 2)
    return params, opt_state, value, error


def dataset(length):
    ts = jnp.linspace(0.0, 2.0, length)
    rng = np.random.default_rng(0)
    y0 = rng.uniform(-0.6, 1.0, (BATCH, DIM)).astype(np.float32)
    ys = np.stack([y0 * np.cos(t) + np.roll(y0, 1, axis=1) * np.sin(t) for t in np.asarray(ts)], axis=1)
    return ts, jnp.asarray(ys)


def main():
    stage_steps = [int(sys.argv[1]), int(sys.argv[2])]
    params = init_mlp(jax.random.PRNGKey(0))
    opt_state = optim.init(params)
    for length, steps in zip((8, 16), stage_steps):
        ts, ys = dataset(length)
        for step in range(steps):
            scale = 1.0 if step == 1 and length == 8 else jnp.float32(1.0)  # a Python float once: a weak type
            params, opt_state, value, error = make_step(params, opt_state, ts, ys, scale)  # the loop's step call
        print(f"length {length}: loss {float(value):.5f} adaptive-solver error {float(error):.5f}", flush=True)


if __name__ == "__main__":
    main()
