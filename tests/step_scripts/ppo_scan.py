"""A whole training jitted once, as PureJaxRL writes it: a lax.scan of PPO-like updates (rollout in a small
environment, advantages, clipped policy loss, an optax step) inside one jit_train, called once."""
import jax
import jax.numpy as jnp
import optax

OBS, ACT, HID, ENVS, T, UPDATES = 8, 4, 64, 16, 16, 12


def init(key):
    k1, k2, k3 = jax.random.split(key, 3)
    return {"w1": jax.random.normal(k1, (OBS, HID)) * 0.1, "pi": jax.random.normal(k2, (HID, ACT)) * 0.1,
            "v": jax.random.normal(k3, (HID, 1)) * 0.1}


def policy(p, obs):
    h = jnp.tanh(obs @ p["w1"])
    return h @ p["pi"], (h @ p["v"])[..., 0]


def env_step(state, action):
    state = 0.9 * state + 0.1 * jax.nn.one_hot(action, OBS, dtype=state.dtype).sum(-1, keepdims=True)
    return state, -jnp.abs(state).mean(-1)


def train(key):
    params = init(key)
    tx = optax.adam(3e-4)
    opt = tx.init(params)

    def update(carry, _):
        params, opt, state, key = carry

        def rollout(c, _):
            state, key = c
            key, sub = jax.random.split(key)
            logits, value = policy(params, state)
            action = jax.random.categorical(sub, logits)
            logp = jax.nn.log_softmax(logits)[jnp.arange(ENVS), action]
            state, reward = env_step(state, action)
            return (state, key), (state, action, logp, value, reward)

        (state, key), (obs, act, logp, value, reward) = jax.lax.scan(rollout, (state, key), None, T)
        adv = reward - value
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)

        def loss(p):
            logits, v = policy(p, obs)
            new = jax.nn.log_softmax(logits)[jnp.arange(T)[:, None], jnp.arange(ENVS)[None], act]
            ratio = jnp.exp(new - logp)
            pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 0.8, 1.2) * adv).mean()
            return pg + 0.5 * ((v - reward) ** 2).mean()

        grads = jax.grad(loss)(params)
        upd, opt = tx.update(grads, opt)
        return (optax.apply_updates(params, upd), opt, state, key), reward.mean()

    state = jnp.zeros((ENVS, OBS))
    (params, _, _, _), rewards = jax.lax.scan(update, (params, opt, state, key), None, UPDATES)
    return params, rewards


params, rewards = jax.jit(train)(jax.random.key(0))
print("reward", float(rewards[-1]))
