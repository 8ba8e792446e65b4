"""The check of every script on a lent GPU, and the wheels it carries there."""
