"""One typed place for every setting of a run: defaults, validation, TOML and JSON.

The command line, the Flower app (`[tool.flwr.app.config]`) and the clients all build a
`RunConfig` from here, so a setting has one name, one default and one check.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLIENT_RULES = ("fedavg", "fedprox", "scaffold", "feddyn")
ANCHOR_METHODS = ("fedpfn", "fedpnu")
SERVER_ALGORITHMS = ("fedavg", "fedavgm", "fedadam", "fedyogi", "fedadagrad")
DATASETS = ("fmnist", "mnist", "cifar10", "cifar100", "svhn")
MODELS = ("mlp", "cnn", "resnet20", "vgg11")
PARTITIONS = ("dirichlet", "iid", "shards")
GRANULARITIES = ("weight", "neuron")
SCHEDULES = ("round", "fixed")


class ConfigError(ValueError):
    """A setting that cannot run; its message lists one problem per line."""


def _opt(default: Any, help: str, **meta: Any) -> Any:
    return field(default=default, metadata={"help": help, **meta})


@dataclass
class RunConfig:
    """Every setting of one simulation; saved as `config.json` in the run folder."""

    # what to train
    algorithm: str = _opt(
        "fedavg",
        "client algorithm: fedavg, fedprox, scaffold, feddyn, fedpfn, fedpnu, "
        "or an anchor method joined to a client rule, e.g. fedpfn+fedprox",
    )
    server: str = _opt(
        "fedavg",
        "server algorithm: fedavg, fedavgm, fedadam, fedyogi, fedadagrad, or package.module:Class",
    )
    dataset: str = _opt("fmnist", f"one of {', '.join(DATASETS)}")
    model: str = _opt("cnn", f"one of {', '.join(MODELS)}")
    data_root: str | None = _opt(None, "folder holding the dataset files (default: Debian's for fmnist)")
    download: bool = _opt(False, "let torchvision download mnist/cifar/svhn into --data-root")
    # federation
    num_clients: int = _opt(20, "clients in the federation")
    clients_per_round: int = _opt(10, "clients sampled each round")
    rounds: int = _opt(20, "communication rounds")
    partition: str = _opt("dirichlet", f"one of {', '.join(PARTITIONS)}")
    alpha: float = _opt(0.5, "Dirichlet concentration (smaller = more label skew)")
    shards_per_client: int = _opt(2, "shards (classes) per client for --partition shards")
    min_partition_size: int = _opt(10, "fewest training samples a client may hold")
    seed: int = _opt(0, "run seed: partition, sampling, init, masks, data order")
    # local training
    local_epochs: int = _opt(1, "local epochs per round")
    batch_size: int = _opt(64, "local batch size")
    lr: float = _opt(0.05, "local learning rate")
    lr_decay: float = _opt(1.0, "learning rate multiplied by this each round")
    momentum: float = _opt(0.9, "local SGD momentum")
    weight_decay: float = _opt(5e-4, "local SGD weight decay")
    optimizer: str = _opt("sgd", "local optimizer: sgd or adam")
    # anchors (FedPFN / FedPNU)
    anchor_ratio: float = _opt(0.4, "fraction of weights fixed as anchors, in [0, 1)")
    anchor_granularity: str | None = _opt(
        None, "weight or neuron (default: weight for fedpfn, neuron for fedpnu)"
    )
    anchor_schedule: str = _opt(
        "round", "round: new mask each round; fixed: one mask for the whole run"
    )
    anchor_classifier: bool = _opt(True, "anchor the classifier layer too")
    anchor_norm: bool = _opt(True, "anchor norm-layer scales and shifts too")
    # client-rule parameters
    prox_mu: float = _opt(0.01, "FedProx proximal coefficient")
    feddyn_alpha: float = _opt(0.01, "FedDyn regularisation coefficient")
    # server-rule parameters
    server_lr: float | None = _opt(
        None, "server learning rate of fedavgm/fedadam/fedyogi/fedadagrad (default: Flower's)"
    )
    server_momentum: float = _opt(0.9, "server momentum (fedavgm) / beta_1 (adaptive)")
    # resources and faults
    client_cpus: float = _opt(1.0, "CPUs per simulated client (Ray)")
    client_gpus: float = _opt(0.0, "GPU fraction per simulated client (Ray)")
    ray_address: str | None = _opt(
        None, "join a running Ray cluster (e.g. 'auto' or HOST:6379) instead of starting one"
    )
    min_replies: int = _opt(1, "fewest successful replies to aggregate a round")
    simulate_failures: float = _opt(0.0, "probability that a selected client fails (seeded)")
    # run folder
    out: str | None = _opt(None, "run folder (default: runs/<algorithm>-<dataset>-<model>-s<seed>)")
    overwrite: bool = _opt(False, "replace a run folder that already holds a run")
    checkpoint_every: int = _opt(0, "write a checkpoint every N rounds (0: only at the end)")
    target_accuracy: float = _opt(0.8, "accuracy whose first round is reported in comparisons")

    # --- derived views -------------------------------------------------------------------

    @property
    def anchor_method(self) -> str | None:
        """`fedpfn`, `fedpnu` or None, from `algorithm`."""
        head = self.algorithm.split("+")[0]
        return head if head in ANCHOR_METHODS else None

    @property
    def client_rule(self) -> str:
        """The local training rule the anchors (if any) sit on."""
        parts = self.algorithm.split("+")
        if parts[0] in ANCHOR_METHODS:
            return parts[1] if len(parts) > 1 else "fedavg"
        return parts[0]

    @property
    def granularity(self) -> str:
        if self.anchor_granularity:
            return self.anchor_granularity
        return "neuron" if self.anchor_method == "fedpnu" else "weight"

    @property
    def run_dir(self) -> Path:
        return Path(self.out or f"runs/{self.algorithm}-{self.dataset}-{self.model}-s{self.seed}")

    def lr_at(self, server_round: int) -> float:
        return self.lr * self.lr_decay ** (server_round - 1)

    # --- checks --------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """Every reason this configuration cannot run, one line each."""
        out: list[str] = []

        def need(ok: bool, message: str) -> None:
            if not ok:
                out.append(message)

        parts = self.algorithm.split("+")
        valid_algorithm = (
            (len(parts) == 1 and parts[0] in CLIENT_RULES + ANCHOR_METHODS)
            or (len(parts) == 2 and parts[0] in ANCHOR_METHODS and parts[1] in CLIENT_RULES)
        )
        need(
            valid_algorithm,
            f"algorithm: unknown '{self.algorithm}'; use one of "
            f"{', '.join(CLIENT_RULES + ANCHOR_METHODS)}, or fedpfn+RULE / fedpnu+RULE",
        )
        need(
            self.server in SERVER_ALGORITHMS or ":" in self.server,
            f"server: unknown '{self.server}'; use one of {', '.join(SERVER_ALGORITHMS)} "
            "or package.module:StrategyClass",
        )
        need(self.dataset in DATASETS, f"dataset: unknown '{self.dataset}'; use one of {', '.join(DATASETS)}")
        need(self.model in MODELS, f"model: unknown '{self.model}'; use one of {', '.join(MODELS)}")
        need(
            self.partition in PARTITIONS,
            f"partition: unknown '{self.partition}'; use one of {', '.join(PARTITIONS)}",
        )
        need(self.optimizer in ("sgd", "adam"), f"optimizer: unknown '{self.optimizer}'; use sgd or adam")
        need(self.alpha > 0, f"alpha: {self.alpha} must be > 0")
        need(self.num_clients >= 1, f"num_clients: {self.num_clients} must be at least 1")
        need(
            1 <= self.clients_per_round <= max(self.num_clients, 1),
            f"clients_per_round: {self.clients_per_round} must be between 1 and num_clients "
            f"({self.num_clients})",
        )
        need(self.rounds >= 1, f"rounds: {self.rounds} must be at least 1")
        need(self.local_epochs >= 1, f"local_epochs: {self.local_epochs} must be at least 1")
        need(self.batch_size >= 1, f"batch_size: {self.batch_size} must be at least 1")
        need(self.lr > 0, f"lr: {self.lr} must be > 0")
        need(0 < self.lr_decay <= 1, f"lr_decay: {self.lr_decay} must be in (0, 1]")
        need(0 <= self.momentum < 1, f"momentum: {self.momentum} must be in [0, 1)")
        need(self.weight_decay >= 0, f"weight_decay: {self.weight_decay} must be >= 0")
        need(self.shards_per_client >= 1, f"shards_per_client: {self.shards_per_client} must be at least 1")
        need(self.min_partition_size >= 1, f"min_partition_size: {self.min_partition_size} must be at least 1")
        need(0 <= self.anchor_ratio < 1, f"anchor_ratio: {self.anchor_ratio} must be in [0, 1)")
        need(
            self.anchor_granularity in (None, *GRANULARITIES),
            f"anchor_granularity: unknown '{self.anchor_granularity}'; use weight or neuron",
        )
        need(
            self.anchor_schedule in SCHEDULES,
            f"anchor_schedule: unknown '{self.anchor_schedule}'; use round or fixed",
        )
        need(self.prox_mu >= 0, f"prox_mu: {self.prox_mu} must be >= 0")
        need(self.feddyn_alpha > 0, f"feddyn_alpha: {self.feddyn_alpha} must be > 0")
        need(self.server_lr is None or self.server_lr > 0, f"server_lr: {self.server_lr} must be > 0")
        need(0 <= self.server_momentum < 1, f"server_momentum: {self.server_momentum} must be in [0, 1)")
        need(self.client_cpus > 0, f"client_cpus: {self.client_cpus} must be > 0")
        need(self.client_gpus >= 0, f"client_gpus: {self.client_gpus} must be >= 0")
        need(
            1 <= self.min_replies <= max(self.clients_per_round, 1),
            f"min_replies: {self.min_replies} must be between 1 and clients_per_round "
            f"({self.clients_per_round})",
        )
        need(
            0 <= self.simulate_failures < 1,
            f"simulate_failures: {self.simulate_failures} must be in [0, 1)",
        )
        need(self.checkpoint_every >= 0, f"checkpoint_every: {self.checkpoint_every} must be >= 0")
        need(0 < self.target_accuracy <= 1, f"target_accuracy: {self.target_accuracy} must be in (0, 1]")
        if self.data_root is not None and not Path(self.data_root).is_dir():
            out.append(f"data_root: '{self.data_root}' is not a directory")
        return out

    def validated(self) -> RunConfig:
        """Return self if it can run, else raise ConfigError listing every problem."""
        problems = self.problems()
        if problems:
            raise ConfigError("\n".join(problems))
        return self

    # --- (de)serialisation ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunConfig:
        """Build from a mapping whose keys may use '-' or '_'; unknown keys are refused."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        unknown = []
        for raw_key, value in values.items():
            key = raw_key.replace("-", "_")
            if key not in known:
                unknown.append(raw_key)
                continue
            kwargs[key] = _coerce(known[key], value)
        if unknown:
            raise ConfigError(
                f"unknown setting(s) {', '.join(sorted(unknown))}; known: {', '.join(known)}"
            )
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_toml(cls, path: str | Path) -> RunConfig:
        return cls.from_dict(read_toml(path))


def read_toml(path: str | Path) -> dict[str, Any]:
    """A preset's settings; a `[run]` table is accepted as well as top-level keys."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config: file '{path}' does not exist") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config: '{path}' is not valid TOML ({err})") from None
    return dict(data.get("run", data))


def _coerce(f: dataclasses.Field, value: Any) -> Any:
    """Accept the loosely typed values of TOML, Flower run configs and JSON."""
    kind = str(f.type)
    if value is None or (isinstance(value, str) and value == "" and "None" in kind):
        return None
    try:
        if kind.startswith("bool"):
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                return value.lower() in ("true", "1", "yes")
            return bool(value)
        if kind.startswith("int"):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if kind.startswith("float"):
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{f.name}: '{value}' is not a valid {kind.split(' ')[0]}") from None
