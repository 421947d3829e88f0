"""A user's own server algorithm, loaded by `--server user_strategy:HalfwayFedAvg`."""

from __future__ import annotations

from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import FedAvg


class HalfwayFedAvg(FedAvg):
    """Moves the global model half way to the clients' average (server lr 0.5)."""

    def configure_train(self, server_round, arrays, config, grid):
        self.previous = arrays
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        arrays, metrics = super().aggregate_train(server_round, replies)
        if arrays is None:
            return arrays, metrics
        half = {
            name: Array(0.5 * self.previous[name].numpy() + 0.5 * array.numpy())
            for name, array in arrays.items()
        }
        return ArrayRecord(half), metrics


class NeedsBeta(FedAvg):
    """A strategy whose constructor needs an argument (`--server-args '{"beta": 0.2}'`)."""

    def __init__(self, beta: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.beta = beta
