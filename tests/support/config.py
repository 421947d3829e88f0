"""Small run settings for tests, written under one scratch folder removed at exit (not the checkout)."""

from __future__ import annotations

import atexit
import shutil
import tempfile

from fedpfn.core.config import RunConfig
from fedpfn.core.user_code import code_settings, name_code
from fedpfn.runtime.algorithms import load_config

# Runs that tests start without an `out` write here, not into the checkout.
_SCRATCH = tempfile.mkdtemp(prefix="fedpfn-tests-")
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)

def tiny_config(**overrides) -> RunConfig:
    """Fashion-MNIST, the MLP, 4 clients: small enough to train in a second."""
    values = dict(
        dataset="fmnist",
        model="mlp",
        num_clients=4,
        clients_per_round=2,
        rounds=2,
        batch_size=64,
        lr=0.05,
        partition="iid",
        seed=0,
        out=tempfile.mkdtemp(dir=_SCRATCH),
    )
    values.update(overrides)
    name_code(*code_settings(values))  # the settings a test gives, as if typed
    return load_config(values)
