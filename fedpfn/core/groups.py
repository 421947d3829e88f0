"""Settings grouped by concern: each choice holds only the settings it uses (fedpfn.core.variants).

`cfg.partition` is one of `Dirichlet`, `Shards`, `Iid`, `Tasks` or `FlwrPartition`; `cfg.engine`
one of `Auto` (the batched engine's default: vmap on a GPU, processes on a CPU of several
cores), `Vmap`, `Processes`, `Threads`, `Loop` or `Ray`. A run of `--partition shards` has no
`alpha` to read, and a run on Ray no `engine_chunk`. Where the clients compute (`client_cpus`,
`client_gpus`, `ray_address`) is a group beside the engine, `cfg.placement` (fedpfn.core.concerns): both engines read it, and under
`flwr run` the ClientApp reads `client_cpus` whatever the engine. A concern with no choice is a
group of one variant (fedpfn.core.concerns).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from fedpfn.core.init_file import fresh_head_setting, init_file_problem, sha256_problem
from fedpfn.core.settings import above, at_least, between, one_of, setting
from fedpfn.core.variants import Group, chooser
from partitions import PARTITION_METHODS, is_flwr, partition_problem

ENGINES = ("batched", "ray")  # fedpfn.runtime.engines implements each
_INIT = chooser("str | None", setting(
    None,
    "start from this state dict instead of the seeded initialisation: .safetensors, or a tensors-only "
    ".pt/.pth; the header names it with its sha256 and its round-0 accuracy",
    init_file_problem,
))  # fmt: skip
ENGINE_MODES = ("auto", "vmap", "processes", "threads", "loop")


def _min_size() -> Any:
    return setting(10, "fewest training samples a client may hold", at_least(1), kind="federation")


class _Split:
    """What every partition says: its method, as `--partition` names it."""

    chosen_by: ClassVar[dict[str, str]] = {}

    @property
    def method(self) -> str:
        return self.chosen_by.get("partition") or getattr(self, "partition")


@dataclass(frozen=True)
class Dirichlet(_Split):
    """Label skew drawn from a Dirichlet distribution per class."""

    chosen_by: ClassVar[dict[str, str]] = {"partition": "dirichlet"}
    alpha: float = setting(0.5, "Dirichlet concentration (smaller = more label skew)", above(0), kind="federation")
    min_partition_size: int = _min_size()


@dataclass(frozen=True)
class Shards(_Split):
    """Each client holds a few label-sorted shards."""

    chosen_by: ClassVar[dict[str, str]] = {"partition": "shards"}
    shards_per_client: int = setting(
        2, "shards (classes) per client for --partition shards", at_least(1), kind="federation"
    )
    min_partition_size: int = _min_size()


@dataclass(frozen=True)
class Iid(_Split):
    chosen_by: ClassVar[dict[str, str]] = {"partition": "iid"}
    min_partition_size: int = _min_size()


@dataclass(frozen=True)
class Tasks(_Split):
    """Clients of Fashion-MNIST tasks (partitions/tasks.py)."""

    chosen_by: ClassVar[dict[str, str]] = {"partition": "tasks"}
    min_partition_size: int = _min_size()


def _flwr_name(value: str) -> str | None:
    return None if is_flwr(value) else f"'{value}' is not flwr:NAME"


@dataclass(frozen=True)
class FlwrPartition(_Split):
    """A flwr-datasets partitioner, `flwr:NAME`, with its keyword arguments."""

    partition: str = setting("flwr:IidPartitioner", "flwr:NAME", _flwr_name, kind="federation")
    partition_args: str = setting("", "flwr:NAME's keyword arguments, a JSON object, e.g. '{\"alpha\": 0.5}' (fedpfn "
                                  "sets num_partitions, seed and partition_by)", kind="federation")  # fmt: skip


Partition = Dirichlet | Shards | Iid | Tasks | FlwrPartition

PARTITION = Group(
    "partition",
    {"partition": chooser("str", setting(
        "dirichlet", f"one of {', '.join(PARTITION_METHODS)}, or flwr:NAME, a flwr-datasets partitioner "
        "(docs/guide/data.md)", partition_problem, kind="federation",
    ))},  # fmt: skip
    (Dirichlet, Shards, Iid, Tasks, FlwrPartition),
    {
        "alpha": "only --partition dirichlet uses it",
        "shards_per_client": "only --partition shards uses it",
        "partition_args": "only --partition flwr:NAME uses it",
        "min_partition_size": "flwr:NAME takes its own, in --partition-args",
    },
    ("partition", "partition_args", "alpha", "shards_per_client", "min_partition_size"),
)


class _Engine:
    """What every engine says: its name, as `--engine` names it, and its mode (None: the engine has none)."""

    chosen_by: ClassVar[dict[str, str]] = {}

    @property
    def name(self) -> str:
        return self.chosen_by["engine"]

    @property
    def mode(self) -> str | None:
        return self.chosen_by.get("engine_mode")


def _workers() -> Any:
    return setting(
        None,
        "Ray actors the batched engine spreads a round's clients over, each running the batched program "
        "(default: one per GPU when this machine has several, or with --ray-address one per GPU of the "
        "cluster, else one per node with that node's CPUs; else none: this process)",
        at_least(1),
        kind="placement",
    )


def _chunk() -> Any:
    return setting(
        0,
        "clients per vmapped program of the batched engine (0: as many as the device's free memory holds)",
        at_least(0),
        kind="placement",
    )


@dataclass(frozen=True)
class Auto(_Engine):
    """The batched engine's default: its mode chosen by the machine that runs it (vmap on a GPU; on
    the CPU, processes where it has several cores, else loop: fedpfn.runtime.engines.runner.mode_of),
    recorded once chosen. It keeps vmap's settings, which a GPU's choice uses."""

    chosen_by: ClassVar[dict[str, str]] = {"engine": "batched", "engine_mode": "auto"}
    engine_chunk: int = _chunk()
    engine_workers: int | None = _workers()


@dataclass(frozen=True)
class Vmap(_Engine):
    """The batched engine as one stacked program over a round's clients."""

    chosen_by: ClassVar[dict[str, str]] = {"engine": "batched", "engine_mode": "vmap"}
    engine_chunk: int = _chunk()
    engine_workers: int | None = _workers()


@dataclass(frozen=True)
class Processes(_Engine):
    """The batched engine with a round's clients dealt to worker processes, one CPU thread each."""

    chosen_by: ClassVar[dict[str, str]] = {"engine": "batched", "engine_mode": "processes"}


@dataclass(frozen=True)
class Threads(_Engine):
    """The batched engine with a round's clients side by side, one CPU thread each."""

    chosen_by: ClassVar[dict[str, str]] = {"engine": "batched", "engine_mode": "threads"}
    engine_workers: int | None = _workers()


@dataclass(frozen=True)
class Loop(_Engine):
    """The batched engine with a round's clients one after another (`client_cpus` threads each)."""

    chosen_by: ClassVar[dict[str, str]] = {"engine": "batched", "engine_mode": "loop"}
    engine_workers: int | None = _workers()


@dataclass(frozen=True)
class Ray(_Engine):
    """Flower's simulation engine: one ClientApp call per client."""

    chosen_by: ClassVar[dict[str, str]] = {"engine": "ray"}


Engine = Auto | Vmap | Processes | Threads | Loop | Ray
BatchedMode = type[Vmap] | type[Processes] | type[Threads] | type[Loop]  # what auto resolves to

ENGINE = Group(
    "engine",
    {
        "engine": chooser("str", setting(
            "batched",
            "where clients train: batched (a round's clients as one program in this process, on its GPU or "
            "CPU) or ray (Flower's simulation engine, one ClientApp call per client; clusters)",
            one_of(ENGINES),
            kind="placement",
        )),
        "engine_mode": chooser("str", setting(
            "auto",
            "how the batched engine runs a round: vmap (one stacked program), processes (clients dealt to worker "
            "processes, one CPU thread each), threads (clients side by side, one CPU thread each), loop (one after "
            "another); auto: vmap on a GPU, processes on a CPU of several cores, else loop (never timed: the same "
            "command gives the same numbers whatever the load; processes, threads and loop give the same numbers)",
            one_of(ENGINE_MODES),
            kind="placement",
        )),
    },
    (Auto, Vmap, Processes, Threads, Loop, Ray),
    {
        "engine_mode": "only --engine batched uses it",
        "engine_workers": "only --engine batched uses it (Ray actors for its vmap, threads and loop modes)",
        "engine_chunk": "only the batched engine's vmap mode (--engine-mode vmap or auto) runs a round in chunks",
    },
    ("engine", "engine_mode", "engine_chunk", "engine_workers"),
)


@dataclass(frozen=True)
class NoClientEvaluation:
    """No federated evaluation: the clients never evaluate."""

    chosen_by: ClassVar[dict[str, float]] = {"evaluate_clients": 0.0}


@dataclass(frozen=True)
class ClientEvaluation:
    """`--evaluate-clients F`: a seeded fraction of the clients evaluates every K rounds."""

    chosen_by: ClassVar[dict[str, float]] = {}
    evaluate_clients: float = setting(1.0, "F > 0", between(0, 1, low_open=True), kind="federation")
    evaluate_clients_every: int = setting(
        1, "clients evaluate every K rounds (and the last)", at_least(1), kind="federation"
    )


FEDERATED_EVAL = Group(
    "federated_eval",
    {"evaluate_clients": chooser("float", setting(
        0.0, "federated evaluation: this fraction of the clients (seeded, at least one) evaluates the global model, "
        "and its own where the rule keeps one (FedBN, --personal), on its local test split; metrics.jsonl gets the "
        "weighted and plain mean, the 10th percentile and the worst client; 0: never", between(0, 1), kind="federation",
    ))},  # fmt: skip
    (NoClientEvaluation, ClientEvaluation),
    {"evaluate_clients_every": "only --evaluate-clients F (F > 0) uses it"},
    ("evaluate_clients", "evaluate_clients_every"),
)


@dataclass(frozen=True)
class NoAlignment:
    """No alignment measurement."""

    chosen_by: ClassVar[dict[str, int]] = {"alignment_every": 0}


@dataclass(frozen=True)
class Alignment:
    """`--alignment-every K`: every K rounds, how aligned the round's client models are."""

    chosen_by: ClassVar[dict[str, int]] = {}
    alignment_every: int = setting(1, "K > 0", at_least(1), kind="bookkeeping")
    alignment_clients: int = setting(
        3, "client models an alignment measurement compares (every pair of them)", at_least(2), kind="bookkeeping"
    )
    alignment_samples: int = setting(
        2000, "evaluation samples an alignment measurement uses", at_least(1), kind="bookkeeping"
    )


ALIGNMENT = Group(
    "alignment",
    {"alignment_every": chooser("int", setting(
        0,
        "every K rounds measure how aligned the round's client models are: loss and accuracy barriers "
        "of pairs and the fusion gap (mean client accuracy minus their average's); 0: never",
        at_least(0),
        kind="bookkeeping",
    ))},  # fmt: skip
    (NoAlignment, Alignment),
    {name: "only --alignment-every K (K > 0) uses it" for name in ("alignment_clients", "alignment_samples")},
    ("alignment_every", "alignment_clients", "alignment_samples"),
)

ClientEval = NoClientEvaluation | ClientEvaluation
Aligned = NoAlignment | Alignment


@dataclass(frozen=True)
class Seeded:
    """The seeded initialisation: no start file."""

    chosen_by: ClassVar[dict[str, None]] = {"init": None}


def _a_path(value: str | None) -> str | None:
    return None if value is not None else "a start file"


@dataclass(frozen=True)
class Start:
    """`--init FILE`: the global model starts from a state dict, checked by its sha256."""

    chosen_by: ClassVar[dict[str, None]] = {}
    init: str = dataclasses.field(default="", metadata={**_INIT.metadata, "chooses": _a_path})
    init_sha256: str | None = setting(
        None,
        "the sha256 that --init's file must have (default: the file's, recorded in config.json; a resume "
        "refuses a start file that changed)",
        sha256_problem,
    )
    fresh_head: bool = fresh_head_setting(False)


START = Group(
    "start",
    {"init": _INIT},
    (Seeded, Start),
    {"init_sha256": "only --init uses it", "fresh_head": "only --init uses it"},
    ("init", "init_sha256", "fresh_head"),
)
Started = Seeded | Start

