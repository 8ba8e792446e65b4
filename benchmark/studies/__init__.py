"""Studies of one question each: the code-level details of PPO and TRPO, bf16's gradients, the Breakout agent."""
