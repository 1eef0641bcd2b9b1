"""An Equinox CNN classifier trained the way Equinox's MNIST tutorial trains one: ``make_step`` (an
``eqx.filter_jit`` of loss, grads and an optax update) once per step, and every ``EVAL_EVERY`` steps
(step 0 included) an ``evaluate`` pass over the test set that calls the jitted ``loss`` and
``compute_accuracy`` once per test batch. The test set is not a whole number of batches, so its last
batch is smaller and both evaluation functions compile again for it. Random images stand in for
MNIST's (no download).

    python eqx_classifier.py STEPS [EVAL_EVERY]
"""

import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

BATCH, TEST_SIZE, SIDE, CLASSES = 32, 7 * 32 + 16, 16, 10


class CNN(eqx.Module):
    layers: list

    def __init__(self, key):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        self.layers = [
            eqx.nn.Conv2d(1, 4, kernel_size=4, key=k1),
            eqx.nn.MaxPool2d(kernel_size=2),
            jax.nn.relu,
            jnp.ravel,
            eqx.nn.Linear(4 * 12 * 12, 64, key=k2),
            jax.nn.sigmoid,
            eqx.nn.Linear(64, 32, key=k3),
            jax.nn.relu,
            eqx.nn.Linear(32, CLASSES, key=k4),
            jax.nn.log_softmax,
        ]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def cross_entropy(y, pred_y):
    return -jnp.mean(jnp.take_along_axis(pred_y, jnp.expand_dims(y, 1), axis=1))


@eqx.filter_jit
def loss(model, x, y):
    return cross_entropy(y, jax.vmap(model)(x))


@eqx.filter_jit
def compute_accuracy(model, x, y):
    return jnp.mean(y == jnp.argmax(jax.vmap(model)(x), axis=1))


def evaluate(model, test_x, test_y):
    avg_loss, avg_acc, n = 0.0, 0.0, 0
    for i in range(0, len(test_x), BATCH):
        x, y = test_x[i:i + BATCH], test_y[i:i + BATCH]
        avg_loss += loss(model, x, y)  # the evaluation's loss call
        avg_acc += compute_accuracy(model, x, y)
        n += 1
    return avg_loss / n, avg_acc / n


def train(model, optim, steps, eval_every, train_x, train_y, test_x, test_y):
    opt_state = optim.init(eqx.filter(model, eqx.is_array))

    @eqx.filter_jit
    def make_step(model, opt_state, x, y):
        loss_value, grads = eqx.filter_value_and_grad(loss)(model, x, y)
        updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, loss_value

    rng = np.random.default_rng(1)
    for step in range(steps):
        idx = rng.integers(0, len(train_x), BATCH)
        model, opt_state, train_loss = make_step(model, opt_state, train_x[idx], train_y[idx])  # the loop's step call
        if step % eval_every == 0 or step == steps - 1:
            test_loss, test_acc = evaluate(model, test_x, test_y)
            print(f"step={step} train_loss={float(train_loss):.3f} test_loss={float(test_loss):.3f} "
                  f"test_accuracy={float(test_acc):.3f}", flush=True)
    return model


def main():
    steps = int(sys.argv[1])
    eval_every = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    rng = np.random.default_rng(0)
    train_x = rng.standard_normal((512, 1, SIDE, SIDE), dtype=np.float32)
    train_y = rng.integers(0, CLASSES, 512).astype(np.int32)
    test_x = rng.standard_normal((TEST_SIZE, 1, SIDE, SIDE), dtype=np.float32)
    test_y = rng.integers(0, CLASSES, TEST_SIZE).astype(np.int32)
    model = CNN(jax.random.PRNGKey(5678))
    train(model, optax.adamw(3e-4), steps, eval_every, train_x, train_y, test_x, test_y)


if __name__ == "__main__":
    main()
