"""What reproduces the reference results, as one package: its modules (runs, curves, reference, cli, processes,
cleanrl) hold the code its commands share; its folders hold the commands by kind (sweeps/, tools/, peers/, gpu/,
studies/) and the results (results/). Every module imports the others, and the training scripts, by their names from
the repository's top, so a command runs as a module from there: `python -m benchmark.tools.run ...` (the sweeps put the
repository on PYTHONPATH, so that they run from any directory). README.md lists every file."""
