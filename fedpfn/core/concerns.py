"""Settings grouped by a concern with no choice to make: each a group of one variant (fedpfn.core.variants).

`cfg.task` holds what is trained on what (`Task`: dataset, model, its projection head, the data's
folder, the entries clients keep), `cfg.federation` who takes part, for how long and what a round
tolerates (`Federation`), `cfg.local` how a client trains (`LocalTraining`: epochs, batch size,
the optimizer and its step), `cfg.evaluation` how the global model is evaluated and the clients'
local test splits (`Evaluation`), `cfg.tracking` where a run's numbers are also logged
(`Tracking`), `cfg.placement` where the clients compute (`Placement`), `cfg.output` the run folder
and what goes into it (`Output`). Users type the flat flags, and config.json writes them flat in
the order they had before the groups (fedpfn.core.config.FLAT_ORDER), as every group does
(fedpfn.core.groups has the groups where a choice decides the other settings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from fedpfn.core.data import DATASETS, dataset_problem
from fedpfn.core.models import MAX_PROJECTION_HEAD, MODELS, TIMM_PREFIX, model_problem
from fedpfn.core.settings import above, at_least, between, one_of, setting
from fedpfn.core.training import OPTIMIZERS
from fedpfn.core.variants import Group


@dataclass(frozen=True)
class Task:
    """What is trained on what: the dataset, the model (with its projection head), where the data's
    files are, and the entries each client keeps for itself."""

    chosen_by: ClassVar[dict[str, Any]] = {}
    dataset: str = setting("fmnist", f"one of {', '.join(DATASETS)}, hf:NAME (through flwr-datasets), or package.module:"
                           "load for your own (docs/guide/data.md)", dataset_problem, kind="federation")  # fmt: skip
    model: str = setting(
        "cnn", f"one of {', '.join(MODELS)}, {TIMM_PREFIX}NAME (a timm vision transformer), or package.module:build "
        "for your own (docs/guide/data.md)", model_problem,
        kind="federation",
    )
    projection_head: int = setting(
        0,
        "a projection head of this width between the model's representation and its classifier "
        "(MOON's paper: 256); 0: none",
        between(0, MAX_PROJECTION_HEAD),
    )
    data_root: str | None = setting(
        None, "folder holding the dataset files (default: Debian's for fmnist)", kind="bookkeeping"
    )
    download: bool = setting(
        False, "let torchvision download mnist/cifar/svhn into --data-root", kind="bookkeeping"
    )
    personal: str = setting(
        "",
        "entries each client keeps for itself (never sent, averaged or anchored): comma-separated "
        "fnmatch patterns over the model's state_dict names, e.g. 'classifier.*'",
    )


TASK = Group("task", {}, (Task,), {}, ("dataset", "model", "projection_head", "data_root", "download", "personal"))


@dataclass(frozen=True)
class Federation:
    """Who takes part, for how long, and what a round tolerates: the clients, the rounds, the
    replies a round needs and waits for, and the seeded failures."""

    chosen_by: ClassVar[dict[str, Any]] = {}
    num_clients: int = setting(20, "clients in the federation", at_least(1), kind="federation")
    clients_per_round: int = setting(10, "clients sampled each round", at_least(1), kind="federation")
    rounds: int = setting(20, "communication rounds", at_least(1), kind="federation")
    min_replies: int = setting(1, "fewest successful replies to aggregate a round", at_least(1))
    round_timeout: float = setting(600.0, "seconds a round waits for replies (0: no limit)", at_least(0))
    simulate_failures: float = setting(
        0.0, "probability that a selected client fails (seeded)", between(0, 1, high_open=True), kind="federation"
    )


FEDERATION = Group(
    "federation",
    {},
    (Federation,),
    {},
    ("num_clients", "clients_per_round", "rounds", "min_replies", "round_timeout", "simulate_failures"),
)


@dataclass(frozen=True)
class LocalTraining:
    """How each client trains in a round: one concern, one choice (no variant to pick)."""

    chosen_by: ClassVar[dict[str, Any]] = {}
    local_epochs: int = setting(1, "local epochs per round", at_least(1), kind="federation")
    batch_size: int = setting(64, "local batch size", at_least(1), kind="federation")
    lr: float = setting(0.05, "local learning rate", above(0))
    lr_decay: float = setting(1.0, "learning rate multiplied by this each round", between(0, 1, low_open=True))
    momentum: float = setting(0.9, "local SGD momentum", between(0, 1, high_open=True))
    weight_decay: float = setting(5e-4, "local weight decay", at_least(0))
    optimizer: str = setting("sgd", "local optimizer: sgd or adam", one_of(OPTIMIZERS))

    def lr_at(self, server_round: int) -> float:
        return self.lr * self.lr_decay ** (server_round - 1)


LOCAL = Group(
    "local",
    {},
    (LocalTraining,),
    {},
    ("local_epochs", "batch_size", "lr", "lr_decay", "momentum", "weight_decay", "optimizer"),
)


@dataclass(frozen=True)
class Evaluation:
    """Where and how often the global model is evaluated, and the clients' local test splits."""

    chosen_by: ClassVar[dict[str, Any]] = {}
    eval_every: int = setting(
        1, "evaluate the global model every K rounds (the last round always)", at_least(1), kind="federation"
    )
    validation_fraction: float = setting(
        0.0,
        "hold out this fraction of the training set and evaluate on it instead of the test set "
        "(for tuning: metrics then say val_accuracy)",
        between(0, 0.5),
        kind="federation",
    )
    local_test_fraction: float = setting(
        0.0,
        "hold out this fraction of each client's partition as its local test split, evaluated with "
        "the global model before and after local training (clients.jsonl, per-round mean and worst 10 %)",
        between(0, 0.5),
        kind="federation",
    )
    eval_last: int = setting(
        0,
        "evaluate the global model in each of the last N rounds too, whatever --eval-every says (an "
        "endpoint that averages the last N rounds, at the cost of N evaluations)",
        at_least(0),
        kind="federation",
    )

    def evaluates(self, server_round: int, rounds: int) -> bool:
        """Whether the global model is evaluated after `server_round` of `rounds`."""
        return server_round % self.eval_every == 0 or server_round > rounds - max(self.eval_last, 1)


EVALUATION = Group(
    "evaluation", {}, (Evaluation,), {}, ("eval_every", "validation_fraction", "local_test_fraction", "eval_last")
)


@dataclass(frozen=True)
class Tracking:
    """Where a run's numbers are also logged: a resume may switch them (their kind is tracking)."""

    chosen_by: ClassVar[dict[str, Any]] = {}
    tensorboard: bool = setting(False, "write TensorBoard event files under <out>/tensorboard", kind="tracking")
    wandb: bool = setting(
        False, "log to Weights & Biases (WANDB_MODE=offline: files under <out>/wandb)", kind="tracking"
    )


TRACKING = Group("tracking", {}, (Tracking,), {}, ("tensorboard", "wandb"))


@dataclass(frozen=True)
class Output:
    """The run folder and what goes into it: where, whether an earlier run's files are replaced, how
    often a checkpoint is written, the accuracy comparisons report the first round of."""

    chosen_by: ClassVar[dict[str, Any]] = {}
    out: str | None = setting(
        None,
        "run folder (default: runs/<algorithm>[-<server>]-<dataset>-<model>-<8 hex digits of the other "
        "settings>-s<seed>: different settings never share one)",
        kind="bookkeeping",
    )
    overwrite: bool = setting(False, "replace the files of an earlier run in --out", kind="bookkeeping")
    checkpoint_every: int = setting(
        1, "write a checkpoint every N rounds (0: only at the end)", at_least(0), kind="bookkeeping"
    )
    target_accuracy: float = setting(
        0.8, "accuracy whose first round is reported in comparisons", between(0, 1, low_open=True), kind="bookkeeping"
    )


OUTPUT = Group("output", {}, (Output,), {}, ("out", "overwrite", "checkpoint_every", "target_accuracy"))


@dataclass(frozen=True)
class Placement:
    """Where the clients compute: CPUs and GPU share per client, a Ray cluster to join. A resume
    may move them (their kind is placement); the engine (fedpfn.core.groups) reads them."""

    chosen_by: ClassVar[dict[str, Any]] = {}
    client_cpus: float = setting(1.0, "CPUs per simulated client (Ray)", above(0), kind="placement")
    client_gpus: float | None = setting(
        None,
        "GPU share per client: the Ray engine reserves it for each client (default: the visible GPUs "
        "shared evenly by the clients the CPUs run at once, fedpfn/runtime/resources.py); the batched engine "
        "trains on the visible GPU unless it is 0; 0: clients on the CPU on both engines",
        at_least(0),
        kind="placement",
    )
    ray_address: str | None = setting(
        None, "join a running Ray cluster (e.g. 'auto' or HOST:6379) instead of starting one", kind="placement"
    )


PLACEMENT_GROUP = Group("placement", {}, (Placement,), {}, ("client_cpus", "client_gpus", "ray_address"))
