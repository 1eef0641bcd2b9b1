"""A Flax NNX training loop with an evaluation every 5th step (compiled at its first call, step 4): a window of
steps 10:20 holds evaluations of a function compiled long before it opened."""
import jax
import optax
from flax import nnx


class Net(nnx.Module):
    def __init__(self, rngs):
        self.a = nnx.Linear(256, 512, rngs=rngs)
        self.b = nnx.Linear(512, 512, rngs=rngs)
        self.c = nnx.Linear(512, 10, rngs=rngs)

    def __call__(self, x):
        return self.c(nnx.relu(self.b(nnx.relu(self.a(x)))))


model = Net(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
key = jax.random.PRNGKey(0)
x, y = jax.random.normal(key, (256, 256)), jax.random.randint(key, (256,), 0, 10)
xe, ye = jax.random.normal(key, (1024, 256)), jax.random.randint(key, (1024,), 0, 10)


@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(m):
        return optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


@nnx.jit
def eval_step(model, x, y):
    return (model(x).argmax(-1) == y).mean()


for i in range(40):
    loss = train_step(model, optimizer, x, y)
    if i % 5 == 4:
        print(i, float(loss), float(eval_step(model, xe, ye)))
