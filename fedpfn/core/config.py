"""One typed place for every setting of a run, validated once and saved with the run.

The core settings are declared here; each algorithm declares its own hyperparameters beside
its code (`FedProxParams` next to `FedProxClient`, `AnchorParams` next to the anchors),
`fedpfn.runtime.algorithms` collects them and a run keeps them namespaced by their algorithm
(`fedprox.prox_mu`, fedpfn.core.hyper). The core settings are grouped by concern: the partition,
the engine, the start and the two measurements are variants that hold only the settings their
choice uses (fedpfn.core.groups), the task, the federation, local training, evaluation, tracking,
placement and output groups of one variant (fedpfn.core.concerns); algorithm, server and seed,
which name a run, stay top-level. The command line, TOML presets, Flower's run
config (`[tool.flwr.app.config]`) and `config.json` are all derived from these declarations, flat
(`RunFlags`), so a setting has one name, one default and one check. Keys may be written with `-` or `_`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fedpfn.core.groups import ALIGNMENT, ENGINE, FEDERATED_EVAL, PARTITION, Aligned, Alignment, ClientEval  # noqa: I001
from fedpfn.core.groups import ClientEvaluation, Dirichlet, Engine, FlwrPartition, Loop, NoAlignment
from fedpfn.core.groups import START, Auto, NoClientEvaluation, Partition, Ray, Seeded, Start, Started, Tasks
from fedpfn.core.concerns import EVALUATION, FEDERATION, LOCAL, OUTPUT, PLACEMENT_GROUP, TASK, TRACKING, Evaluation
from fedpfn.core.concerns import Federation, LocalTraining, Output, Placement, Task, Tracking
from fedpfn.core.hyper import changed_settings, flat_view, hyper_of
from fedpfn.core.init_file import init_file_problem, start_changed
from fedpfn.core.kwargs import partition_args_problem
from fedpfn.core.personal import unmatched_problem
from fedpfn.core.seeding import MAX_SEED
from fedpfn.core.settings import ConfigError, between, field_map, is_set, of_kind, parse_leniently, problems, setting
from fedpfn.core.user_code import is_code

__all__ = ["ConfigError", "RunConfig"]

P = TypeVar("P")


@dataclass
class RunConfig:
    """Every setting of one simulation; saved as `config.json` in the run folder."""

    # what to train
    algorithm: str = setting(
        "fedavg", "client algorithm: a client rule, an anchor method, or METHOD+RULE (fedpfn+fedprox)"
    )
    server: str = setting("fedavg", "server algorithm by name, or package.module:StrategyClass")
    # what is trained on what: dataset, model, projection head, the data's folder, what clients keep
    task: Task = dataclasses.field(default_factory=Task, metadata={"group": TASK})
    # the seeded initialisation, or a start file with its own settings (fedpfn.core.groups)
    start: Started = dataclasses.field(default_factory=Seeded, metadata={"group": START})
    # who takes part, for how long, what a round tolerates: clients, rounds, replies, failures
    federation: Federation = dataclasses.field(default_factory=Federation, metadata={"group": FEDERATION})
    # the partition: a variant holding only its own settings (fedpfn.core.groups)
    partition: Partition = dataclasses.field(default_factory=Dirichlet, metadata={"group": PARTITION})
    seed: int = setting(0, "run seed: partition, sampling, init, masks, data order", between(0, MAX_SEED))
    # local training: epochs, batch size, the optimizer and its step (fedpfn.core.groups)
    local: LocalTraining = dataclasses.field(default_factory=LocalTraining, metadata={"group": LOCAL})
    # the global model's evaluation and the clients' local test splits (fedpfn.core.groups)
    evaluation: Evaluation = dataclasses.field(default_factory=Evaluation, metadata={"group": EVALUATION})
    # federated evaluation and the alignment measurement: each off, or on with its own settings
    federated_eval: ClientEval = dataclasses.field(default_factory=NoClientEvaluation, metadata={"group": FEDERATED_EVAL})
    alignment: Aligned = dataclasses.field(default_factory=NoAlignment, metadata={"group": ALIGNMENT})
    # where a run's numbers are also logged (fedpfn.core.groups)
    tracking: Tracking = dataclasses.field(default_factory=Tracking, metadata={"group": TRACKING})
    # where the clients train: a variant holding only its own settings (fedpfn.core.groups)
    engine: Engine = dataclasses.field(default_factory=Auto, metadata={"group": ENGINE})
    # where the clients compute: CPUs and GPU share per client, a Ray cluster to join (fedpfn.core.concerns)
    placement: Placement = dataclasses.field(default_factory=Placement, metadata={"group": PLACEMENT_GROUP})
    # the run folder and what goes into it (fedpfn.core.concerns)
    output: Output = dataclasses.field(default_factory=Output, metadata={"group": OUTPUT})
    # the algorithms' hyperparameters: `fedprox.prox_mu`, or by name until resolved (fedpfn.core.hyper)
    hparams: dict[str, Any] = dataclasses.field(default_factory=dict, metadata={"flag": False})
    # a group's settings that its variant does not take, as parsed: refused where given (problems),
    # kept as read in config.json (to_dict), where no run uses them
    unused: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False, metadata={"flag": False})

    # --- derived views -------------------------------------------------------------------

    @property
    def run_dir(self) -> Path:
        """`out`, or runs/<algorithm>[-<server>]-<dataset>-<model>-<settings>-s<seed>.

        <settings> is 8 hex digits of the SHA-256 of every setting that changes what the run
        computes, the seed aside (placement, tracking and bookkeeping left out): runs of
        different settings never share a default folder, and one setting's seeds sit side by side.
        """
        if self.output.out:
            return Path(self.output.out)
        ignored = {"seed", *of_kind(RunFlags, "bookkeeping"), *PLACEMENT, *TRACKERS}
        settings = {key: value for key, value in flat_view(self.to_dict()).items() if key not in ignored}
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
        server = "" if self.server == "fedavg" else "-" + self.server.rpartition(":")[2]
        name = re.sub(r"[^A-Za-z0-9.+_-]", "_", f"{self.algorithm}{server}-{self.task.dataset}-{self.task.model}")
        return Path("runs") / f"{name}-{digest}-s{self.seed}"

    def in_folder(self, out: str, **output: Any) -> RunConfig:
        """The same run written to `out` (and any other output setting given, e.g. overwrite)."""
        return dataclasses.replace(self, output=dataclasses.replace(self.output, out=out, **output))

    def lr_at(self, server_round: int) -> float:
        return self.local.lr_at(server_round)

    def hyper(self, namespace: str, cls: type[P]) -> P:
        """The hyperparameters of one part of the run, typed, e.g. `cfg.hyper("fedprox", FedProxParams)`."""
        return hyper_of(self.hparams, namespace, cls)

    # --- checks --------------------------------------------------------------------------

    def problems(self, given: Collection[str] | None = None, unknown: Collection[str] = ()) -> list[str]:
        """Every reason these core settings cannot run, one line each (the registry adds the algorithms').

        `unknown`: settings whose value did not parse; a check that reads one is left out, as is
        one that reads a setting already refused (`--num-clients 0` is one problem, not two).
        `given`: the settings the user gave (fedpfn.core.settings.is_set); one given that the
        run would not use is refused. Where the clients train is run_sim.py's engines' to say:
        under `flwr run` (`given` None) Flower's federation decides and the ClientApp reads
        client_cpus, so those settings are checked only with `given`.
        """
        found = problems(self) + [line for group in GROUPS for line in problems(getattr(self, group.name))]
        found.sort(key=lambda line: FLAT_POSITION.get(line.split(":")[0], len(FLAT_POSITION)))  # as --help-all
        out = [line for line in found if line.split(":")[0] not in unknown]
        refused = {*unknown, *(line.split(":")[0] for line in out)}
        out += [line for names, check in RELATIONS if refused.isdisjoint(names) and (line := check(self))]
        if refused.isdisjoint(ALIGNMENT_READS) and (line := _alignment_clients_problem(self, given)):
            out.append(line)
        if given is not None and "init" in given and isinstance(self.start, Seeded):  # `--init ""`: not "no start"
            out.append(f"init: {init_file_problem('')}, or leave --init out")
        return out + self._unused_problems(given, refused)

    def _unused_problems(self, given: Collection[str] | None, refused: Collection[str]) -> list[str]:
        """A setting given that the run would not use: one its group's variant does not take
        (`unused`, with the refusal its group words), or one USED_ONLY_IF says this run leaves unused."""
        values = {**self.flat(), **self.unused}
        why = {name: why for group in GROUPS for name, why in group.why.items()}
        unused = {name: why[name] for name in self.unused} | {
            name: why for name, (used, why) in USED_ONLY_IF.items() if not used(self)
        }
        lines = []
        for name, reason in unused.items():
            value, check = values[name], FLAT_FIELDS[name].metadata["check"]
            if name in refused or (given is None and name in PLACEMENT) or not is_set(name, value, FLAT_DEFAULTS[name], given):
                continue
            bad = check(value) if check is not None and value is not None else None  # its own check first
            lines.append(f"{name}: {bad or f'{value} is set, but {reason}'}")
        return lines

    def fingerprint(self) -> dict[str, Any]:
        """The settings that decide a run's numbers: what a checkpoint is tied to."""
        return {k: v for k, v in self.to_dict().items() if k not in NOT_IN_FINGERPRINT}

    def differences(self, other: RunConfig, ignore: tuple[str, ...] = ("out", "overwrite")) -> list[str]:
        """`key: mine != theirs` for every setting that differs (fedpfn.core.hyper.changed_settings)."""
        return [f"{k}: {a} != {b}" for k, a, b in changed_settings(self.to_dict(), other.to_dict(), ignore)]

    # --- (de)serialisation ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Every setting, and the hyperparameters; a start's own settings only with a start (as the
        algorithms' only with their algorithm), so a run without one reads as it did before them."""
        left_out = [*(START_ONLY if isinstance(self.start, Seeded) else ()),
                    *(() if isinstance(self.federated_eval, ClientEvaluation) else EVAL_ONLY)]
        # `unused` as read: a folder written before their refusal keeps its fingerprint
        values = {**self.flat(), **self.unused}
        left_out += [name for name in ("partition_args", "eval_last") if not values[name]]  # added later: absent at 0
        return {**{k: values[k] for k in FLAT_FIELDS if k not in left_out}, **self.hparams}

    def flat(self) -> dict[str, Any]:
        """Every core setting by the name users type (`dataset`, not `task.dataset`), a variant's
        absent ones at their defaults: the one lookup of checks that read settings by name."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.metadata.get("flag") is not False:
                value = getattr(self, f.name)
                values |= f.metadata["group"].flat(value) if "group" in f.metadata else {f.name: value}
        return values

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def parse(
        cls, values: dict[str, Any], hparam_fields: dict[str, dataclasses.Field]
    ) -> tuple[RunConfig, list[str]]:
        """(the config of every value that parses, one line per value or key that does not).

        Keys may use '-' or '_'; `hparam_fields`: the algorithms' (fedpfn.runtime.algorithms.hparam_fields).
        """
        parsed, unparsed = parse_leniently({**core_fields(), **hparam_fields}, values)
        hparams = {k: v for k, v in parsed.items() if k in hparam_fields}
        core = {k: v for k, v in parsed.items() if k not in hparam_fields}
        unused: dict[str, Any] = {}
        for group in GROUPS:
            core[group.name], lines, left = group.build(core)
            unparsed += lines
            unused |= {k: v for k, v in left.items() if k in parsed}  # one at its default was not written
            core = {k: v for k, v in core.items() if k not in group.declarations() or k == group.name}
        return cls(**core, hparams=hparams, unused=unused), unparsed


def _at_most(name: str, limit: str) -> Callable[[RunConfig], str | None]:
    def check(cfg: RunConfig) -> str | None:
        value, most = (flat := cfg.flat())[name], flat[limit]
        return f"{name}: {value} must be at most {limit} ({most})" if value > most else None

    return check


ALIGNMENT_READS = ("alignment_clients", "clients_per_round", "alignment_every")
START_ONLY = ("init_sha256", "fresh_head")  # what only a run with --init has
EVAL_ONLY = ("evaluate_clients", "evaluate_clients_every")  # what only a run with --evaluate-clients has


def _alignment_clients_problem(cfg: RunConfig, given: Collection[str] | None) -> str | None:
    """Set above a round's clients, the count would not be what was asked (the default, 3, means up to 3)."""
    measured, most = cfg.alignment, cfg.federation.clients_per_round
    if not isinstance(measured, Alignment) or measured.alignment_clients <= most:
        return None
    if is_set("alignment_clients", measured.alignment_clients, FLAT_DEFAULTS["alignment_clients"], given):
        return f"alignment_clients: {measured.alignment_clients} must be at most clients_per_round ({most}): " \
            "a measurement compares a round's clients"
    return None


def _data_root_problem(cfg: RunConfig) -> str | None:
    task = cfg.task
    if task.data_root is not None and not Path(task.data_root).expanduser().is_dir() and not task.download:
        return f"data_root: '{task.data_root}' is not a directory (with --download it is made)"
    return None


# checks that read two or more settings: (the settings they read, the check)
RELATIONS: list[tuple[tuple[str, ...], Callable[[RunConfig], str | None]]] = [
    (("clients_per_round", "num_clients"), _at_most("clients_per_round", "num_clients")),
    (("min_replies", "clients_per_round"), _at_most("min_replies", "clients_per_round")),
    (("data_root", "download"), _data_root_problem),
    (
        ("init", "init_sha256"),
        lambda c: isinstance(s := c.start, Start) and s.init_sha256 and start_changed(s.init, s.init_sha256),
    ),
    (
        ("partition", "dataset"),
        lambda c: isinstance(c.partition, Tasks) and (named := c.task.dataset) != "fmnist"
        and f"partition: tasks are derived from Fashion-MNIST's classes; use --dataset fmnist, not {named}",
    ),
    (
        ("partition", "partition_args"),
        lambda c: isinstance(p := c.partition, FlwrPartition)
        and partition_args_problem(p.partition, p.partition_args),
    ),
    (("evaluate_clients", "local_test_fraction"), lambda c: isinstance(e := c.federated_eval, ClientEvaluation)
     and c.evaluation.local_test_fraction == 0
     and f"evaluate_clients: {e.evaluate_clients} evaluates on each client's local test split; give it one with "
     "--local-test-fraction F (e.g. 0.2)"),  # fmt: skip
    (
        ("personal", "model", "dataset", "projection_head"),
        lambda c: unmatched_problem((t := c.task).model, t.dataset, t.projection_head, t.personal),
    ),
]
# settings a run uses only with others: (whether this run uses it, what the refusal says); a
# group's settings that its choice does not use are not here: its variant has no place for them
USED_ONLY_IF: dict[str, tuple[Callable[[RunConfig], bool], str]] = {
    "download": (
        lambda c: not is_code(c.task.dataset), "a dataset of your own (--dataset package.module:load) loads itself"
    ),
    "client_cpus": (  # not the engine's own: under `flwr run` the ClientApp reads it whatever the engine
        lambda c: isinstance(c.engine, Ray | Loop),
        "the batched engine uses it only with --engine-mode loop (threads a client); --engine ray reserves it",
    ),
}
GROUPS = (TASK, START, FEDERATION, PARTITION, LOCAL, EVALUATION, FEDERATED_EVAL, ALIGNMENT, TRACKING, ENGINE,
          PLACEMENT_GROUP, OUTPUT)  # fmt: skip
# the settings flat, in the order --help-all and config.json have always listed them: a field of
# RunConfig stands for its settings, a setting named alone sits apart from the rest of its group
FLAT_ORDER = ("algorithm", "server", "dataset", "model", "start", "projection_head", "data_root", "download",
              "num_clients", "clients_per_round", "rounds", "partition", "seed", "local", "personal", "evaluation",
              "federated_eval", "alignment", "tracking", "engine", "placement", "min_replies", "round_timeout",
              "simulate_failures", "output")  # fmt: skip


def _flat_fields() -> list[tuple[str, Any, dataclasses.Field]]:
    """RunConfig's settings as users type them, in FLAT_ORDER: a group's field as the group's flat settings."""
    declared: dict[str, dataclasses.Field] = {}
    groups: dict[str, tuple[str, ...]] = {}
    for f in dataclasses.fields(RunConfig):
        group = f.metadata.get("group")
        declared |= group.declarations() if group else {} if f.metadata.get("flag") is False else {f.name: f}
        groups[f.name] = group.order if group else (f.name,)
    names = [name for item in FLAT_ORDER for name in groups.get(item, (item,))]
    assert sorted(names) == sorted(declared), "FLAT_ORDER names every setting once"
    return [(k, declared[k].type, dataclasses.field(default=declared[k].default, metadata=declared[k].metadata))
            for k in names]  # fmt: skip


# every setting as a flag, a TOML key, a key of Flower's run config and of config.json
RunFlags = dataclasses.make_dataclass("RunFlags", _flat_fields(), frozen=True)
FLAT_FIELDS = field_map(RunFlags)
FLAT_DEFAULTS = {name: f.default for name, f in FLAT_FIELDS.items()}
FLAT_POSITION = {name: k for k, name in enumerate(FLAT_FIELDS)}
core_fields = FLAT_FIELDS.copy  # RunConfig's own settings as typed (the algorithms' ride in `hparams`)
PLACEMENT = of_kind(RunFlags, "placement")  # where a run computes (the engine, cfg.placement): a resume may move it
TRACKERS = of_kind(RunFlags, "tracking")  # where its numbers are also logged: a resume may switch them
# RunConfig's fields a resume may change: those all of whose settings are placement or tracking
MOVABLE = tuple(f.name for f in dataclasses.fields(RunConfig)
                if {*getattr(f.metadata.get("group"), "order", [f.name])} <= {*PLACEMENT, *TRACKERS})  # fmt: skip
# settings that may change between a run and its continuation (`--resume DIR --rounds N`)
# or that only say where and how it runs, never what it computes
NOT_IN_FINGERPRINT = ("rounds", "out", "overwrite", *PLACEMENT, *TRACKERS)
