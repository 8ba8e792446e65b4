"""How far --bf16 moves ppo_atari.py's update: fp32 and bf16 gradients of the same loss, same weights, same minibatch.

Run:   python -m benchmark.studies.bf16_gradients [--checkpoint runs/<run>/checkpoint.pt] [--env-id BreakoutNoFrameskip-v4]

For the agent at its initialisation (seed 1) and, with --checkpoint, for a trained one: one rollout of the script's
default shape (8 envs x 128 steps) with that agent, then for each of the 4 minibatches the PPO loss (ppo_atari.ppo_losses,
advantages normalised per minibatch, old log-probs and values from an fp32 pass) and its gradient over every
parameter, once in fp32 and once under --bf16's autocast. Printed per minibatch: both losses, the cosine of the two
gradients, their norm ratio and the relative size of their difference; and, as the yardstick, the cosines between
the fp32 gradients of different minibatches of the same rollout: the noise every PPO update already has.
"""

import argparse

import numpy as np
import torch
import torch.nn.functional as F

import ppo_atari


def rollout(agent, envs, args):
    """obs, actions, fp32 log-probs and values, advantages and returns of one num_steps x num_envs rollout."""
    obs, actions, rewards, dones, next_obs = [], [], [], [], envs.reset(seed=args.seed)[0]
    with torch.no_grad():
        for _ in range(args.num_steps):
            action = agent.get_action_and_value(torch.as_tensor(next_obs))[0]
            obs.append(next_obs)
            actions.append(action)
            next_obs, reward, terminated, truncated, _ = envs.step(action.numpy())
            rewards.append(reward)
            dones.append(terminated | truncated)
        obs, actions = torch.as_tensor(np.stack(obs)).flatten(0, 1), torch.stack(actions).flatten()
        _, logprobs, _, values = agent.get_action_and_value(obs, actions)
        advantages, returns = ppo_atari.compute_gae(
            torch.as_tensor(np.stack(rewards), dtype=torch.float32),
            values.view(args.num_steps, -1),
            torch.as_tensor(np.stack(dones), dtype=torch.float32),
            agent.get_value(torch.as_tensor(next_obs)),
            args.gamma,
            args.gae_lambda,
        )
    return obs, actions, logprobs, values, advantages.flatten(), returns.flatten()


def gradient(agent, batch, mb, args, bf16):
    obs, actions, logprobs, values, advantages, returns = batch
    agent.bf16 = bf16
    agent.zero_grad()
    _, newlogprob, entropy, newvalue = agent.get_action_and_value(obs[mb], actions[mb])
    mb_advantages = (advantages[mb] - advantages[mb].mean()) / (advantages[mb].std() + 1e-8)
    loss = ppo_atari.ppo_losses(newlogprob, logprobs[mb], mb_advantages, newvalue, values[mb], returns[mb], entropy, args)[0]
    loss.backward()
    return loss.item(), torch.cat([p.grad.flatten() for p in agent.parameters()])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="a ppo_atari.py checkpoint: its trained weights are checked too")
    parser.add_argument("--env-id", default="BreakoutNoFrameskip-v4")
    cli = parser.parse_args()
    torch.set_num_threads(1)
    args = ppo_atari.Args(env_id=cli.env_id)
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    envs = ppo_atari.make_envs(args, "bf16_gradients")
    for label, checkpoint in [("init (seed 1)", None)] + ([("checkpoint", cli.checkpoint)] if cli.checkpoint else []):
        torch.manual_seed(args.seed)
        agent = ppo_atari.Agent(4, envs.single_action_space.n)
        if checkpoint:
            agent.load_state_dict(ppo_atari.load_checkpoint(checkpoint)[0]["model"])
        batch, fp32_grads = rollout(agent, envs, args), []
        for mb in torch.randperm(args.batch_size).view(-1, args.minibatch_size):
            (loss32, g32), (loss16, g16) = (gradient(agent, batch, mb, args, bf16) for bf16 in (False, True))
            fp32_grads.append(g32)
            print(
                f"{label}: loss fp32 {loss32:.5f} bf16 {loss16:.5f}; gradient cosine {F.cosine_similarity(g32, g16, 0):.4f}, "
                f"norm bf16/fp32 {g16.norm() / g32.norm():.3f}, |bf16 - fp32| / |fp32| {(g16 - g32).norm() / g32.norm():.3f}"
            )
        cosines = [F.cosine_similarity(a, b, 0).item() for i, a in enumerate(fp32_grads) for b in fp32_grads[:i]]
        print(f"{label}: fp32 gradients of two different minibatches: cosine {min(cosines):.3f} to {max(cosines):.3f}")
    envs.close()


if __name__ == "__main__":
    main()
