"""A Flax NNX training loop as its examples write it: 30 annotated steps, an evaluation every 10 (outside the
annotation), no block_until_ready inside the loop."""
import jax
import optax
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.l1 = nnx.Linear(256, 512, rngs=rngs)
        self.l2 = nnx.Linear(512, 10, rngs=rngs)

    def __call__(self, x):
        return self.l2(nnx.relu(self.l1(x)))


model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)


def loss_fn(model, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()


@nnx.jit
def train_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return loss


@nnx.jit
def eval_step(model, x, y):
    logits = model(x)
    return loss_fn(model, x, y), (logits.argmax(-1) == y).mean()


key = jax.random.key(0)
x = jax.random.normal(key, (512, 256))
y = jax.random.randint(key, (512,), 0, 10)
xe = jax.random.normal(jax.random.key(1), (8192, 256))
ye = jax.random.randint(jax.random.key(1), (8192,), 0, 10)
for step in range(30):
    with jax.profiler.StepTraceAnnotation("train", step_num=step):
        loss = train_step(model, optimizer, x, y)
    if step % 10 == 9:
        for _ in range(16):
            eval_loss, acc = eval_step(model, xe, ye)
print("loss", float(loss), "eval", float(eval_loss))
