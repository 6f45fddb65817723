"""A slow NumPy ground truth for the loss a worker learns from (core/learner.learner_loss).

Written from the definitions, in float64, sharing no code with the implementation:

  delta_t = r_t + gamma (1 - terminated_t) V(s_{t+1}) - V(s_t)
  A_t     = sum_l (gamma lam)^l delta_{t+l}, up to the step that ends the episode or rollout
  G_t     = A_t + V(s_t)
  total   = -mean(log pi(a_t|s_t) A'_t) + c_v 0.5 mean((G_t - V(s_t))^2) - c_e mean(H(pi(.|s_t)))

pi is a softmax over the logits for discrete actions; for a Box of n actions a Gaussian
per dimension, mean mu_i(s) and standard deviation sigma_i = exp(log_std_i) (the same in
every state), independent of each other:
  log pi(a|s) = sum_i [ -(a_i - mu_i)^2 / (2 sigma_i^2) - log sigma_i - log(2 pi) / 2 ]
  H(pi(.|s))  = sum_i [ log(2 pi e sigma_i^2) / 2 ]

A'_t is A_t normalized over the rollout under --normalize-advantages; under --clip-rewards r_t
is replaced by its sign, under --normalize-rewards by clip(r_t / rollout["return_std"], -10,
10). A_t, A'_t and G_t are targets: the gradient holds them constant.

The loss is computed from a network's outputs (logits [T, B, A], V(s_t) and V(s_{t+1}) [T, B]),
so any network can be checked with it; mlp_outputs is the forward pass of an
a3c_graph.core.model.ActorCriticMLP from its weights, looked up by name ("policy/fc0/weights", ...).
Shapes are time-major as in a3c_graph.core.rollout: T steps of B envs.

The image and recurrent networks have forward passes of their own here, from the same named
weights (cnn_forward, lstm_step), written as loops over output pixels and time steps:

  image   observations [N, C, H, W] (or [N, H, W], one channel); uint8 pixels 0..255 mean
          0..1, bool ones 1.0; a 3x3 convolution of stride s and SAME padding gives an output
          of ceil(H / s) x ceil(W / s), padded with zeros, the odd row or column at the end
  torso   ELU after every convolution and dense layer (cnn), tanh after every dense layer (mlp)
  LSTM    [i, f, g, o] = [x, h] K + b;  c' = sigmoid(f + 1) c + sigmoid(i) tanh(g);
          h' = sigmoid(o) tanh(c');  the heads read h'

Used by tests/unit/core/test_learner.py (the learner), tests/unit/core/test_model.py (the
networks) and tests/e2e/test_tf2_variants.py (the TF2 variants).
"""

from __future__ import annotations

import numpy as np

NORMALIZE_EPSILON = 1e-8  # losses.normalize's
FORGET_BIAS = 1.0  # added to the LSTM's forget gate


def mlp_tower(weights: dict, tower: str, x, features: bool = False):
    """x [..., D] through the layers fc0, fc1, ... of `tower` ("policy" or "value"): tanh
    after each but the last; with `features`, (that output, the last layer's input)."""
    x = np.asarray(x, np.float64)
    num_layers = sum(1 for name in weights
                     if name.startswith(f"{tower}/") and name.endswith("/weights"))
    assert num_layers, f"no {tower}/fc<i>/weights among {sorted(weights)}"
    for i in range(num_layers):
        last_input = x
        x = x @ weights[f"{tower}/fc{i}/weights"] + weights[f"{tower}/fc{i}/biases"]
        if i < num_layers - 1:
            x = np.tanh(x)
    return (x, last_input) if features else x


def mlp_forward(weights: dict, obs):
    """The policy and values V(s) [...] of observations [..., D] of the MLP: the policy is
    logits [..., A], or for a Box (the weights hold policy/log_std) the Gaussian's (mean
    [..., n], log std [..., n]). A log std matrix [F, n] is gSDE's: the log std in each
    state is that of features @ theta, theta from N(0, exp(log_std)^2), the features z
    being the policy tower's last hidden layer: 0.5 log(z^2 @ exp(2 log_std) + 1e-6)."""
    head, z = mlp_tower(weights, "policy", obs, features=True)
    if "policy/log_std" in weights:
        log_std = np.asarray(weights["policy/log_std"], np.float64)
        if log_std.ndim == 2:
            log_std = 0.5 * np.log(np.square(z) @ np.exp(2.0 * log_std) + 1e-6)
        head = (head, np.broadcast_to(log_std, head.shape))
    return head, mlp_tower(weights, "value", obs)[..., 0]


def mlp_outputs(weights: dict, rollout: dict):
    """(the policy [T, B, ...], V(s_t) [T, B], V(s_{t+1}) [T, B]) of the MLP on a rollout."""
    logits, values = mlp_forward(weights, rollout["obs"])
    _, next_values = mlp_forward(weights, rollout["next_obs"])
    return logits, values, next_values


def gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """A_t in the forward view, each env on its own. [T, B] -> [T, B].

    A_t = sum_l (gamma lam)^l delta_{t+l} over the steps up to and including the one that
    ends the episode or the rollout, with
    delta_k = r_k + gamma (1 - terminated_k) V(s_{k+1}) - V(s_k)."""
    num_steps, batch_size = rewards.shape
    advantages = np.zeros((num_steps, batch_size))
    for b in range(batch_size):
        for t in range(num_steps):
            total, weight, k = 0.0, 1.0, t
            while True:
                value_after = 0.0 if terminated[k, b] else next_values[k, b]
                total += weight * (rewards[k, b] + gamma * value_after - values[k, b])
                if terminated[k, b] or truncated[k, b] or k == num_steps - 1:
                    break  # the episode or the rollout ends at k
                weight *= gamma * lam
                k += 1
            advantages[t, b] = total
    return advantages


def targets(values, next_values, rollout: dict, config) -> dict[str, np.ndarray]:
    """What the loss holds constant, [T, B]: the advantages A_t, the returns G_t and the
    advantages the policy term uses, A'_t (normalized or raw)."""
    rewards = np.asarray(rollout["rewards"], np.float64)
    if config.clip_rewards:
        rewards = np.sign(rewards)
    if config.normalize_rewards:
        rewards = np.clip(rewards / rollout["return_std"], -10.0, 10.0)
    advantages = gae(rewards, values, next_values, rollout["terminated"], rollout["truncated"],
                     config.gamma, config.gae_lambda)
    policy_advantages = advantages
    if config.normalize_advantages:
        policy_advantages = ((advantages - advantages.mean())
                             / (advantages.std() + NORMALIZE_EPSILON))
    return {"advantages": advantages, "returns": advantages + values,
            "policy_advantages": policy_advantages}


def log_prob_and_entropy(policy, actions):
    """(log pi(a|s), H(pi(.|s))), each [...], of the taken `actions` under the policy:
    logits [..., A] and actions [...], or a Gaussian's (mean, log std) [..., n] and actions
    [..., n]."""
    if isinstance(policy, tuple):
        mean, log_std = (np.asarray(x, np.float64) for x in policy)
        actions = np.asarray(actions, np.float64)
        log_pi = np.zeros(mean.shape[:-1])
        entropy = np.zeros(mean.shape[:-1])
        for i in range(mean.shape[-1]):  # one dimension at a time, then their sum
            sigma = np.exp(log_std[..., i])
            log_pi += (-(actions[..., i] - mean[..., i]) ** 2 / (2 * sigma ** 2)
                       - np.log(sigma) - 0.5 * np.log(2 * np.pi))
            entropy += 0.5 * np.log(2 * np.pi * np.e * sigma ** 2)
        return log_pi, entropy
    logits = np.asarray(policy, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    log_pi = np.take_along_axis(log_p, np.asarray(actions, int)[..., None], -1)[..., 0]
    return log_pi, -np.sum(np.exp(log_p) * log_p, axis=-1)


def a3c_loss(policy, values, held: dict, actions, config) -> dict[str, float]:
    """The total loss and its parts from the policy (logits [T, B, A], or a Gaussian's
    (mean, log std) [T, B, n]), V(s_t) [T, B] and the targets."""
    log_pi, entropies = log_prob_and_entropy(policy, actions)
    policy_loss = -np.mean(log_pi * held["policy_advantages"])
    value_loss = 0.5 * np.mean((held["returns"] - values) ** 2)
    entropy = np.mean(entropies)
    total = policy_loss + config.value_coef * value_loss - config.entropy_coef * entropy
    return {"total": total, "policy_loss": policy_loss, "value_loss": value_loss,
            "entropy": entropy}


def loss(logits, values, next_values, rollout: dict, config) -> dict[str, float]:
    """The A3C loss of a rollout from a network's outputs on it."""
    held = targets(values, next_values, rollout, config)
    return a3c_loss(logits, values, held, rollout["actions"], config)


def mlp_loss(weights: dict, rollout: dict, config) -> dict[str, float]:
    return loss(*mlp_outputs(weights, rollout), rollout, config)


def mlp_semi_gradient(weights: dict, rollout: dict, config, eps: float = 1e-5) -> dict:
    """d total / d weights of the MLP by central differences, the targets held at their values
    for `weights` (A3C's semi-gradient). {name: array of the weight's shape}."""
    weights = {name: np.asarray(value, np.float64) for name, value in weights.items()}
    _, values, next_values = mlp_outputs(weights, rollout)
    held = targets(values, next_values, rollout, config)

    def total(moved_weights):
        logits, values = mlp_forward(moved_weights, rollout["obs"])
        return a3c_loss(logits, values, held, rollout["actions"], config)["total"]

    gradients = {}
    for name, value in weights.items():
        gradient = np.zeros_like(value)
        for index in np.ndindex(value.shape):
            up, down = value.copy(), value.copy()
            up[index] += eps
            down[index] -= eps
            gradient[index] = (total({**weights, name: up})
                               - total({**weights, name: down})) / (2 * eps)
        gradients[name] = gradient
    return gradients


def clipped(gradients: dict, clip_norm: float) -> dict:
    """The gradients scaled together to a global norm of at most clip_norm."""
    norm = np.sqrt(sum(np.sum(g ** 2) for g in gradients.values()))
    return {name: g * min(1.0, clip_norm / norm) for name, g in gradients.items()}


def softmax(logits):
    shifted = np.exp(logits - np.max(logits, axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def elu(x):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))


def relu(x):
    return np.maximum(x, 0.0)


def image_pixels(obs):
    """Observations [N, C, H, W] or [N, H, W] -> float64 pixels [N, C, H, W] in [0, 1] for
    uint8 (and bool) images; float images are taken as they are."""
    obs = np.asarray(obs)
    pixels = obs.astype(np.float64) / 255.0 if obs.dtype == np.uint8 else obs.astype(np.float64)
    return pixels[:, None] if pixels.ndim == 3 else pixels


def conv_same(x, kernel, biases, stride: int):
    """x [N, C, H, W] -> [N, F, ceil(H / s), ceil(W / s)]: each output pixel (i, j) is the sum
    over the k x k window (k: the kernel's size) at rows i*s + dr - top, columns
    j*s + dc - left (zero outside the image) of x times kernel [dr, dc, C, F], plus the
    biases [F]."""
    num, _, height, width = x.shape
    size, filters = kernel.shape[0], kernel.shape[3]
    out_h, out_w = -(-height // stride), -(-width // stride)
    top = max((out_h - 1) * stride + size - height, 0) // 2
    left = max((out_w - 1) * stride + size - width, 0) // 2
    out = np.zeros((num, filters, out_h, out_w))
    for i in range(out_h):
        for j in range(out_w):
            total = np.array(biases, np.float64)[None, :].repeat(num, 0)
            for dr in range(size):
                for dc in range(size):
                    row, col = i * stride + dr - top, j * stride + dc - left
                    if 0 <= row < height and 0 <= col < width:
                        total = total + x[:, :, row, col] @ kernel[dr, dc]
            out[:, :, i, j] = total
    return out


def conv_valid(x, kernel, biases, stride: int):
    """x [N, C, H, W] -> [N, F, (H - k) // s + 1, (W - k) // s + 1]: each output pixel (i, j)
    is the sum over the k x k window at rows i*s + dr, columns j*s + dc (never outside the
    image) of x times kernel [dr, dc, C, F], plus the biases [F]."""
    size = kernel.shape[0]
    out_h = (x.shape[2] - size) // stride + 1
    out_w = (x.shape[3] - size) // stride + 1
    windows = np.stack([np.stack([x[:, :, i * stride:i * stride + size,
                                    j * stride:j * stride + size]
                                  for j in range(out_w)], axis=-1)
                        for i in range(out_h)], axis=-2)  # [N, C, k, k, out_h, out_w]
    return np.einsum("ncrdij,rdcf->nfij", windows, kernel) + np.asarray(biases)[None, :, None,
                                                                                   None]


def cnn_torso(weights: dict, obs, stride, padding: str = "same", activation: str = "elu"):
    """Features [N, F] of image observations: convolutions torso/conv0, conv1, ... at
    `stride` (one for every layer, or a sequence: layer i's) with `padding` ("same" or
    "valid"), the feature maps flattened row by row with the channels innermost, then the
    dense layers torso/fc0, fc1, ...; each layer followed by `activation` ("elu", "relu")."""
    act = {"elu": elu, "relu": relu}[activation]
    conv = {"same": conv_same, "valid": conv_valid}[padding]
    x = image_pixels(obs)
    i = 0
    while f"torso/conv{i}/kernel" in weights:
        layer_stride = stride if isinstance(stride, int) else stride[i]
        x = act(conv(x, weights[f"torso/conv{i}/kernel"], weights[f"torso/conv{i}/biases"],
                     layer_stride))
        i += 1
    x = x.transpose(0, 2, 3, 1).reshape(len(x), -1)
    i = 0
    while f"torso/fc{i}/weights" in weights:
        x = act(x @ weights[f"torso/fc{i}/weights"] + weights[f"torso/fc{i}/biases"])
        i += 1
    return x


def mlp_torso(weights: dict, obs):
    """Features [N, F] of vector observations [N, D]: tanh layers torso/fc0, fc1, ..."""
    x = np.asarray(obs, np.float64).reshape(len(obs), -1)
    i = 0
    while f"torso/fc{i}/weights" in weights:
        x = np.tanh(x @ weights[f"torso/fc{i}/weights"] + weights[f"torso/fc{i}/biases"])
        i += 1
    return x


def heads(weights: dict, features):
    """logits [N, A] and values [N] of features [N, F]."""
    logits = features @ weights["policy/weights"] + weights["policy/biases"]
    values = features @ weights["value/weights"] + weights["value/biases"]
    return logits, values[:, 0]


def cnn_forward(weights: dict, obs, stride, padding: str = "same", activation: str = "elu"):
    """logits [N, A] and values [N] of a3c_graph.core.model.ActorCriticCNN on images [N, ...]."""
    return heads(weights, cnn_torso(weights, obs, stride, padding, activation))


def lstm_step(weights: dict, features, state):
    """One LSTM step: features [N, F], state [N, 2, H] (c, h) -> the state after it."""
    c, h = state[:, 0], state[:, 1]
    gates = np.concatenate([features, h], axis=1) @ weights["lstm/kernel"] + weights["lstm/biases"]
    i, f, g, o = np.split(gates, 4, axis=1)
    c = sigmoid(f + FORGET_BIAS) * c + sigmoid(i) * np.tanh(g)
    h = sigmoid(o) * np.tanh(c)
    return np.stack([c, h], axis=1)


def lstm_forward(weights: dict, obs, state, torso: str, stride: int = 1):
    """(logits [N, A], values [N], the state after) of a3c_graph.core.model.ActorCriticLSTM acting
    on observations [N, ...] from state [N, 2, H]; torso "mlp" or "cnn"."""
    features = cnn_torso(weights, obs, stride) if torso == "cnn" else mlp_torso(weights, obs)
    after = lstm_step(weights, features, np.asarray(state, np.float64))
    return (*heads(weights, after[:, 1]), after)


def lstm_replay(weights: dict, obs, next_obs, initial_state, done, torso: str, stride: int = 1):
    """The learner's replay of a rollout, step by step as the actor went:
    obs, next_obs [T, B, ...], initial_state [B, 2, H], done [T, B] ->
    logits [T, B, A], V(s_t) [T, B] and V(s_{t+1}) [T, B]. V(s_{t+1}) is valued from the
    state right after step t; where the episode ended the state is zeroed before step t + 1."""
    num_steps = len(obs)
    state = np.asarray(initial_state, np.float64)
    logits, values, next_values = [], [], []
    for t in range(num_steps):
        step_logits, step_values, after = lstm_forward(weights, obs[t], state, torso, stride)
        logits.append(step_logits)
        values.append(step_values)
        next_values.append(lstm_forward(weights, next_obs[t], after, torso, stride)[1])
        state = np.where(np.asarray(done[t])[:, None, None], 0.0, after)
    return np.stack(logits), np.stack(values), np.stack(next_values)
