"""The core tools: the runner, the report, two groups compared, the front figure, steps per second."""
