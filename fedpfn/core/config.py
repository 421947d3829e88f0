"""One typed place for every setting of a run, validated once and saved with the run.

The core settings are declared here; each algorithm declares its own hyperparameters beside
its code (`FedProxParams` next to `FedProxClient`, `AnchorParams` next to the anchors), and
`fedpfn.runtime.algorithms` collects them. The command line, TOML presets, Flower's run config
(`[tool.flwr.app.config]`) and `config.json` are all derived from these declarations, so a
setting has one name, one default and one check. Keys may be written with `-` or `_`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fedpfn.core.data import DATASETS
from fedpfn.core.models import MODELS
from fedpfn.core.seeding import MAX_SEED
from fedpfn.core.settings import (
    ConfigError,
    above,
    at_least,
    between,
    field_map,
    one_of,
    parse_leniently,
    problems,
    read_toml,
    setting,
)
from partitions import PARTITION_METHODS

__all__ = ["ConfigError", "RunConfig", "read_toml"]

P = TypeVar("P")
OPTIMIZERS = ("sgd", "adam")
PLACEMENT = ("ray_address", "client_cpus", "client_gpus")  # where a run computes: a resume may move it
TRACKERS = ("tensorboard", "wandb")  # where its numbers are also logged: a resume may switch them
# settings that may change between a run and its continuation (`--resume DIR --rounds N`)
# or that only say where and how it runs, never what it computes
NOT_IN_FINGERPRINT = ("rounds", "out", "overwrite", *PLACEMENT, *TRACKERS)


@dataclass
class RunConfig:
    """Every setting of one simulation; saved as `config.json` in the run folder."""

    # what to train
    algorithm: str = setting(
        "fedavg", "client algorithm: a client rule, an anchor method, or METHOD+RULE (fedpfn+fedprox)"
    )
    server: str = setting("fedavg", "server algorithm by name, or package.module:StrategyClass")
    dataset: str = setting("fmnist", f"one of {', '.join(DATASETS)}", one_of(DATASETS))
    model: str = setting("cnn", f"one of {', '.join(MODELS)}", one_of(MODELS))
    data_root: str | None = setting(None, "folder holding the dataset files (default: Debian's for fmnist)")
    download: bool = setting(False, "let torchvision download mnist/cifar/svhn into --data-root")
    # federation
    num_clients: int = setting(20, "clients in the federation", at_least(1))
    clients_per_round: int = setting(10, "clients sampled each round", at_least(1))
    rounds: int = setting(20, "communication rounds", at_least(1))
    partition: str = setting("dirichlet", f"one of {', '.join(PARTITION_METHODS)}", one_of(PARTITION_METHODS))
    alpha: float = setting(0.5, "Dirichlet concentration (smaller = more label skew)", above(0))
    shards_per_client: int = setting(2, "shards (classes) per client for --partition shards", at_least(1))
    min_partition_size: int = setting(10, "fewest training samples a client may hold", at_least(1))
    seed: int = setting(0, "run seed: partition, sampling, init, masks, data order", between(0, MAX_SEED))
    # local training
    local_epochs: int = setting(1, "local epochs per round", at_least(1))
    batch_size: int = setting(64, "local batch size", at_least(1))
    lr: float = setting(0.05, "local learning rate", above(0))
    lr_decay: float = setting(1.0, "learning rate multiplied by this each round", between(0, 1, low_open=True))
    momentum: float = setting(0.9, "local SGD momentum", between(0, 1, high_open=True))
    weight_decay: float = setting(5e-4, "local weight decay", at_least(0))
    optimizer: str = setting("sgd", "local optimizer: sgd or adam", one_of(OPTIMIZERS))
    # evaluation
    eval_every: int = setting(1, "evaluate the global model every K rounds (the last round always)", at_least(1))
    validation_fraction: float = setting(
        0.0,
        "hold out this fraction of the training set and evaluate on it instead of the test set "
        "(for tuning: metrics then say val_accuracy)",
        between(0, 0.5),
    )
    # tracking
    local_test_fraction: float = setting(
        0.0,
        "hold out this fraction of each client's partition as its local test split, evaluated with "
        "the global model before and after local training (clients.jsonl, per-round mean and worst 10 %)",
        between(0, 0.5),
    )
    tensorboard: bool = setting(False, "write TensorBoard event files under <out>/tensorboard")
    wandb: bool = setting(False, "log to Weights & Biases (WANDB_MODE=offline: files under <out>/wandb)")
    # resources and faults
    client_cpus: float = setting(1.0, "CPUs per simulated client (Ray)", above(0))
    client_gpus: float | None = setting(
        None,
        "GPU fraction per simulated client (Ray); default: the visible GPUs shared evenly by the clients "
        "the CPUs run at once (fedpfn/runtime/resources.py); 0: clients on the CPU",
        at_least(0),
    )
    ray_address: str | None = setting(
        None, "join a running Ray cluster (e.g. 'auto' or HOST:6379) instead of starting one"
    )
    min_replies: int = setting(1, "fewest successful replies to aggregate a round", at_least(1))
    round_timeout: float = setting(600.0, "seconds a round waits for replies (0: no limit)", at_least(0))
    simulate_failures: float = setting(
        0.0, "probability that a selected client fails (seeded)", between(0, 1, high_open=True)
    )
    # run folder
    out: str | None = setting(None, "run folder (default: runs/<algorithm>-<dataset>-<model>-s<seed>)")
    overwrite: bool = setting(False, "replace the files of an earlier run in --out")
    checkpoint_every: int = setting(1, "write a checkpoint every N rounds (0: only at the end)", at_least(0))
    target_accuracy: float = setting(
        0.8, "accuracy whose first round is reported in comparisons", between(0, 1, low_open=True)
    )
    # the algorithms' own hyperparameters (fedpfn.runtime.algorithms), flat in files and flags
    hparams: dict[str, Any] = dataclasses.field(default_factory=dict, metadata={"flag": False})

    # --- derived views -------------------------------------------------------------------

    @property
    def anchor_method(self) -> str | None:
        """`fedpfn`, `fedpnu` or None, from `algorithm`."""
        from fedpfn.runtime.algorithms import split_algorithm

        return split_algorithm(self.algorithm)[0]

    @property
    def client_rule(self) -> str:
        """The local training rule the anchors (if any) sit on."""
        from fedpfn.runtime.algorithms import split_algorithm

        return split_algorithm(self.algorithm)[1]

    @property
    def run_dir(self) -> Path:
        return Path(self.out or f"runs/{self.algorithm}-{self.dataset}-{self.model}-s{self.seed}")

    def lr_at(self, server_round: int) -> float:
        return self.lr * self.lr_decay ** (server_round - 1)

    def params(self, cls: type[P]) -> P:
        """The hyperparameters of one algorithm, typed, e.g. `cfg.params(FedProxParams)`."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in self.hparams.items() if k in names})

    # --- checks --------------------------------------------------------------------------

    def problems(self) -> list[str]:
        """Every reason this configuration cannot run, one line each."""
        from fedpfn.runtime import algorithms

        out = problems(self)
        out += algorithms.problems(self)
        if self.clients_per_round > self.num_clients:
            out.append(
                f"clients_per_round: {self.clients_per_round} must be at most num_clients ({self.num_clients})"
            )
        if self.min_replies > self.clients_per_round:
            out.append(
                f"min_replies: {self.min_replies} must be at most clients_per_round ({self.clients_per_round})"
            )
        if self.data_root is not None and not Path(self.data_root).expanduser().is_dir():
            out.append(f"data_root: '{self.data_root}' is not a directory")
        return out

    def validated(self) -> RunConfig:
        """This config with its algorithms' hyperparameters resolved, or ConfigError listing every problem."""
        found = self.problems()
        if found:
            raise ConfigError("\n".join(found))
        from fedpfn.runtime.algorithms import resolve_hparams

        return dataclasses.replace(self, hparams=resolve_hparams(self))

    def for_algorithm(self, algorithm: str) -> RunConfig:
        """The same settings for another algorithm, keeping only the hyperparameters it uses."""
        from fedpfn.runtime.algorithms import declared_by

        names = {f.name for cls in declared_by(algorithm, self.server) for f in dataclasses.fields(cls)}
        kept = {k: v for k, v in self.hparams.items() if k in names}
        return dataclasses.replace(self, algorithm=algorithm, hparams=kept)

    def fingerprint(self) -> dict[str, Any]:
        """The settings that decide a run's numbers: what a checkpoint is tied to."""
        return {k: v for k, v in self.to_dict().items() if k not in NOT_IN_FINGERPRINT}

    def differences(self, other: RunConfig, ignore: tuple[str, ...] = ("out", "overwrite")) -> list[str]:
        """`key: mine != theirs` for every setting that differs."""
        mine, theirs = self.to_dict(), other.to_dict()
        keys = sorted((set(mine) | set(theirs)) - set(ignore))
        return [f"{k}: {mine.get(k)} != {theirs.get(k)}" for k in keys if mine.get(k) != theirs.get(k)]

    # --- (de)serialisation ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "hparams"}
        return {**values, **self.hparams}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunConfig:
        """Build from a mapping whose keys may use '-' or '_'; unknown keys are refused."""
        from fedpfn.runtime.algorithms import hparam_fields

        core = {k: f for k, f in field_map(cls).items() if k != "hparams"}
        declared = hparam_fields()
        parsed, unparsed = parse_leniently({**core, **declared}, values)
        hparams = {k: v for k, v in parsed.items() if k in declared}
        cfg = cls(**{k: v for k, v in parsed.items() if k in core}, hparams=hparams)
        if unparsed:  # every problem at once: what did not parse, and what the rest fails
            raise ConfigError("\n".join(unparsed + cfg.problems()))
        return cfg

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls.from_dict(json.loads(text))


def flower_run_config() -> dict[str, Any]:
    """`[tool.flwr.app.config]` as pyproject.toml must declare it: every setting, "" for None."""
    from fedpfn.runtime.algorithms import hparam_fields

    fields = {**{k: f for k, f in field_map(RunConfig).items() if k != "hparams"}, **hparam_fields()}
    return {name.replace("_", "-"): "" if f.default is None else f.default for name, f in fields.items()}


def _toml_value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, bool) else str(value).lower()


if __name__ == "__main__":  # python -m fedpfn.core.config: print pyproject's table
    print("[tool.flwr.app.config]")
    for key, value in flower_run_config().items():
        print(f"{key} = {_toml_value(value)}")
    sys.exit(0)
