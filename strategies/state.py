"""The state an inner Flower strategy carries between rounds, as arrays and plain values.

Checkpoints never pickle: a strategy's state is a tree of dicts and lists whose leaves are
numpy arrays or JSON values, walked by `fedpfn.core.tree` as the checkpoint itself is. A
registered strategy is read through the attributes its registration declares
(strategies/registry.py); a user's class through its own `state()` / `load_state()` when it
defines both, else through those of its attributes that hold arrays or plain values
(callables, configs and other objects stay as the constructor built them); any other Flower
class keeps no state between rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from flwr.app import ArrayRecord
from flwr.serverapp.strategy import Strategy

from fedpfn.core.protocol import to_array_record, to_numpy
from fedpfn.core.tree import PLAIN, decode, encode

_RECORD = "__arrayrecord__"


def _state_leaf(value: Any) -> Any:
    if isinstance(value, ArrayRecord):
        return {_RECORD: to_numpy(value)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (*PLAIN, np.ndarray)):
        return value
    raise TypeError(f"{type(value).__name__} is not state")


def _encode(value: Any) -> Any:
    """A state value as a tree of arrays and plain values, or None if it cannot be one."""
    try:
        return encode(value, _state_leaf)
    except TypeError:
        return None


def _decode(value: Any) -> Any:
    return decode(value, {_RECORD: to_array_record})


def _attributes(strategy: Strategy) -> list[str]:
    """A user's class: its attributes that hold arrays or plain values; Flower's others: none."""
    if type(strategy).__module__.startswith("flwr."):
        return []  # FedMedian, Krum and the other stateless built-ins
    return [k for k, v in vars(strategy).items() if not callable(v) and _encode(v) is not None or v is None]


def strategy_state(strategy: Strategy, declared: Sequence[str] | None = None) -> dict[str, Any]:
    """`declared`: the attributes a registration names (None: find them as the module docstring says)."""
    if declared is None and callable(getattr(strategy, "state", None)) and callable(getattr(strategy, "load_state", None)):
        return {"own": strategy.state()}  # type: ignore[attr-defined]
    names = list(declared) if declared is not None else _attributes(strategy)
    return {"attributes": {name: _encode(getattr(strategy, name)) for name in names}}


def load_strategy_state(strategy: Strategy, state: dict[str, Any]) -> None:
    if "own" in state:
        strategy.load_state(state["own"])  # type: ignore[attr-defined]
        return
    for name, value in state["attributes"].items():
        setattr(strategy, name, _decode(value))
