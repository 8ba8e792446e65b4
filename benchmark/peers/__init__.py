"""Other implementations run beside ours: CleanRL's scripts, Stable-Baselines3 set up as ours, the paper's released code."""
