"""The `fedpfn` command and its verbs (`fedpfn.cli.main`); `run_sim.py` is its simulation verb.

Imports nothing heavy: the signal handlers of `fedpfn.cli.early` must be in place before torch,
Ray and Flower load.
"""
