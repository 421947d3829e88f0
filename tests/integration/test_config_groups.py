"""The partition and the engine as variants (fedpfn.core.groups): a setting its choice does not use
has no place in a run's config, while the flags, config.json and the fingerprint read as before."""

from __future__ import annotations

import dataclasses

import pytest

from fedpfn.core.config import FLAT_DEFAULTS, EVAL_ONLY, START_ONLY, RunConfig
from fedpfn.core.groups import ENGINE, PARTITION, Auto, Dirichlet, FlwrPartition, Iid, Loop, Ray, Shards, Threads, Vmap
from fedpfn.core.groups import Alignment, ClientEvaluation, NoAlignment, NoClientEvaluation, Seeded, Start
from fedpfn.runtime.algorithms import parse_config

CASES = {
    "default": ({}, Dirichlet(), Auto()),
    "shards": ({"partition": "shards", "shards_per_client": 3}, Shards(shards_per_client=3), Auto()),
    "iid": ({"partition": "iid", "min_partition_size": 5}, Iid(min_partition_size=5), Auto()),
    "flwr": (
        {"partition": "flwr:IidPartitioner", "partition_args": "{}"},
        FlwrPartition("flwr:IidPartitioner", "{}"),
        Auto(),
    ),
    "loop": ({"engine_mode": "loop", "client_cpus": 2.0}, Dirichlet(), Loop()),
    "vmap": ({"engine_mode": "vmap", "engine_chunk": 3, "engine_workers": 2}, Dirichlet(), Vmap(3, 2)),
    "ray": ({"engine": "ray", "client_gpus": 0.0}, Dirichlet(), Ray()),
}
# the measurements a run may make: off, or on with their own settings
MEASURED = {
    "none": ({}, NoClientEvaluation(), NoAlignment()),
    "clients": (
        {"evaluate_clients": 0.5, "evaluate_clients_every": 2, "local_test_fraction": 0.2},
        ClientEvaluation(0.5, 2),
        NoAlignment(),
    ),
    "alignment": ({"alignment_every": 2, "alignment_samples": 100}, NoClientEvaluation(), Alignment(2, 3, 100)),
}


def written(values: dict) -> dict:
    """config.json as the flat config wrote it: every setting, the given ones as given; a start's
    and the clients' evaluation's own only where the run has them."""
    left_out = {*([] if values.get("init") else START_ONLY), *([] if values.get("evaluate_clients") else EVAL_ONLY)}
    left_out |= {name for name in ("partition_args", "eval_last") if not values.get(name)}
    return {**{k: v for k, v in FLAT_DEFAULTS.items() if k not in left_out}, **values}


@pytest.mark.parametrize("name", CASES)
def test_the_flags_build_the_variant_and_config_json_reads_as_before(name):
    """config.json (and so the fingerprint a resume checks) is every setting as it was when the
    config was flat: the ones given, every other at its default, a variant's absent ones too."""
    values, partition, engine = CASES[name]
    cfg = parse_config(values)
    assert (cfg.partition, cfg.engine, cfg.unused) == (partition, engine, {})
    assert cfg.to_dict() == written(values)
    assert parse_config(cfg.to_dict()) == cfg


@pytest.mark.parametrize("name", MEASURED)
def test_a_measurement_is_off_or_on_with_its_own_settings(name):
    values, evaluation, alignment = MEASURED[name]
    cfg = parse_config(values)
    assert (cfg.federated_eval, cfg.alignment, cfg.unused) == (evaluation, alignment, {})
    assert cfg.to_dict() == written(values) and parse_config(cfg.to_dict()) == cfg


def test_a_start_file_is_a_start_with_its_own_settings(tmp_path):
    """Seeded has no sha256 or head to read; a start keeps them, and config.json writes them as before."""
    values = {"init": str(tmp_path / "start.safetensors"), "fresh_head": True}
    cfg = parse_config(values)
    assert cfg.start == Start(values["init"], None, True) and parse_config({}).start == Seeded()
    assert cfg.to_dict() == written({**values, "init_sha256": None})
    assert parse_config({"fresh_head": True}).problems(given={"fresh_head"}) == [
        "fresh_head: True is set, but only --init uses it"
    ]


def test_a_variant_has_no_place_for_a_setting_its_choice_does_not_use():
    with pytest.raises(TypeError):
        dataclasses.replace(Shards(), alpha=0.1)
    with pytest.raises(TypeError):
        Ray(engine_workers=2)
    assert not hasattr(Threads(), "engine_chunk") and not hasattr(Iid(), "alpha")
    assert not hasattr(NoAlignment(), "alignment_samples") and not hasattr(NoClientEvaluation(), "evaluate_clients_every")
    with pytest.raises(dataclasses.FrozenInstanceError):
        Dirichlet().alpha = 0.1  # type: ignore[misc]


def test_the_settings_a_choice_leaves_out_are_handed_back_and_refused_where_given():
    variant, lines, unused = PARTITION.build({"partition": "iid", "alpha": 0.3})
    assert (variant, lines, unused["alpha"]) == (Iid(), [], 0.3)
    cfg = parse_config({"partition": "iid", "alpha": 0.3})
    assert cfg.problems(given={"partition", "alpha"}) == ["alpha: 0.3 is set, but only --partition dirichlet uses it"]
    assert cfg.problems(given=None) == cfg.problems(given={"partition", "alpha"})  # not its default: set
    engine = parse_config({"engine": "ray", "engine_workers": 2})
    assert engine.problems(given={"engine", "engine_workers"}) == [
        "engine_workers: 2 is set, but only --engine batched uses it (Ray actors for its vmap, threads and loop modes)"
    ]
    assert engine.problems(given=None) == []  # under flwr run Flower's federation decides where clients train


def test_an_unknown_choice_is_one_line_naming_it():
    variant, lines, _ = ENGINE.build({"engine_mode": "warp"})
    assert variant == Auto() and lines == ["engine_mode: unknown 'warp'; use one of auto, vmap, processes, threads, loop"]
    _, lines, _ = PARTITION.build({"partition": "zipf"})
    assert lines == ["partition: unknown 'zipf'; use one of dirichlet, iid, shards, tasks, or flwr:NAME (a flwr-datasets "
                     "partitioner)"]  # fmt: skip


def test_auto_resolved_is_the_variant_of_the_mode_it_resolved_to():
    """The batched engine's auto becomes the mode the machine picks: vmap's chunk goes with it
    where the mode has none."""
    assert ENGINE.changed(Auto(engine_chunk=4, engine_workers=2), engine_mode="threads") == Threads(engine_workers=2)
    assert ENGINE.changed(Auto(engine_chunk=4), engine_mode="vmap") == Vmap(4)
    assert RunConfig().engine.mode == "auto" and Ray().mode is None and Loop().name == "batched"


def test_a_folder_written_before_the_refusals_keeps_its_fingerprint():
    """config.json of a run started before a setting its partition leaves out was refused (iid with
    alpha 0.1): the value is kept as read, so its checkpoints still belong to it and it resumes."""
    written = {**parse_config({"partition": "iid"}).to_dict(), "alpha": 0.1, "engine": "ray", "engine_mode": "loop"}
    cfg = parse_config(written)
    assert isinstance(cfg.partition, Iid) and cfg.engine == Ray()
    assert cfg.to_dict() == written and cfg.fingerprint()["alpha"] == 0.1
    assert cfg.problems(given=set()) == []  # a resume gives none of them: nothing refused


@pytest.mark.slow  # two tiny runs of two and one rounds, and a resume
def test_a_folder_with_a_setting_its_partition_leaves_out_resumes_to_the_same_numbers(tmp_path, capsys):
    """A run started before such a setting was refused holds it in config.json and in its checkpoint's
    fingerprint (iid, alpha 0.1): it resumes, to the numbers of one uninterrupted run."""
    import json

    import run_sim
    from fedpfn.core.tree import read_tree
    from fedpfn.runtime.runfolder import RunFolder

    flags = ["--dataset", "fmnist", "--model", "mlp", "--num-clients", "4", "--clients-per-round", "2",
             "--partition", "iid", "--seed", "3", "--engine-mode", "threads"]  # fmt: skip
    assert run_sim.main([*flags, "--rounds", "2", "--out", str(tmp_path / "whole")]) == 0
    assert run_sim.main([*flags, "--rounds", "1", "--out", str(tmp_path / "old")]) == 0
    folder = tmp_path / "old"
    config = {**json.loads((folder / "config.json").read_text()), "alpha": 0.1}
    (folder / "config.json").write_text(json.dumps(config, sort_keys=True))
    tree = read_tree(folder / "checkpoint.npz")
    RunFolder(folder).save_checkpoint({**tree.pop("meta")["fingerprint"], "alpha": 0.1}, tree)
    assert run_sim.main(["--resume", str(folder), "--rounds", "2"]) == 0, capsys.readouterr().err

    def numbers(name: str) -> list[dict]:
        rows = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(row).items() if "seconds" not in k} for row in rows]

    assert numbers("old") == numbers("whole")


def test_a_concern_is_one_group_read_as_cfg_concern_and_written_flat_in_its_old_order():
    """What is trained on what is `cfg.task`, who takes part for how long `cfg.federation`, how a client
    trains `cfg.local`, where it computes `cfg.placement`, how the model is evaluated `cfg.evaluation`,
    where numbers are also logged `cfg.tracking`, the run folder `cfg.output`; the flags, config.json's
    keys and their order (so a folder written before the groups resumes) are the flat ones; a bad
    value is named."""
    from fedpfn.core.concerns import EVALUATION, LOCAL, OUTPUT, TRACKING, Evaluation, Federation, LocalTraining, Output
    from fedpfn.core.concerns import Placement, Task, Tracking
    from fedpfn.core.config import MOVABLE

    values = {"lr": 0.1, "momentum": 0.5, "local_epochs": 3, "optimizer": "adam", "eval_every": 2,
              "local_test_fraction": 0.2, "wandb": True, "out": "runs/x", "checkpoint_every": 0, "model": "mlp",
              "projection_head": 8, "personal": "classifier.*", "download": True, "rounds": 3, "min_replies": 2,
              "simulate_failures": 0.1, "engine": "ray", "client_gpus": 0.5, "ray_address": "auto"}  # fmt: skip
    cfg = parse_config(values)
    assert cfg.task == Task("fmnist", "mlp", 8, None, True, "classifier.*")
    assert cfg.federation == Federation(20, 10, 3, 2, 600.0, 0.1)
    assert cfg.placement == Placement(1.0, 0.5, "auto") and "placement" in MOVABLE  # a resume may move it
    assert cfg.local == LocalTraining(local_epochs=3, lr=0.1, momentum=0.5, optimizer="adam")
    assert (cfg.evaluation, cfg.tracking) == (Evaluation(2, 0.0, 0.2), Tracking(False, True))
    assert cfg.output == Output("runs/x", checkpoint_every=0) and cfg.in_folder("y").output == Output("y", checkpoint_every=0)
    assert cfg.to_dict() == written(values) and parse_config(cfg.to_dict()) == cfg
    keys = list(cfg.to_dict())
    assert keys[keys.index("server") + 1 : keys.index("num_clients")] == [  # the task, around the start
        "dataset", "model", "init", "projection_head", "data_root", "download"]  # fmt: skip
    assert keys[keys.index("download") + 1 : keys.index("partition")] == ["num_clients", "clients_per_round", "rounds"]
    assert keys[keys.index("engine_workers") + 1 : keys.index("out")] == [  # the placement, then the federation's rest
        "client_cpus", "client_gpus", "ray_address", "min_replies", "round_timeout", "simulate_failures"]  # fmt: skip
    assert keys[keys.index("seed") + 1 : keys.index("personal")] == list(LOCAL.order)
    evaluation = [name for name in EVALUATION.order if name != "eval_last"]  # left out at 0, as before it was added
    assert keys[keys.index("personal") + 1 : keys.index("alignment_every")] == evaluation  # clients: off
    assert keys[keys.index("alignment_samples") + 1 : keys.index("engine")] == list(TRACKING.order)
    assert keys[keys.index("simulate_failures") + 1 :] == list(OUTPUT.order)
    assert cfg.lr_at(3) == 0.1 and parse_config({"lr": 0.1, "lr_decay": 0.5}).lr_at(3) == 0.025
    assert parse_config({"lr": 0.0}).problems() == ["lr: 0.0 must be > 0"]
    assert parse_config({"projection_head": -1}).problems() == ["projection_head: -1 must be in [0, 8192]"]


def test_the_flat_settings_keep_their_order_and_a_problem_reads_by_flat_name():
    """--help-all and config.json list the settings as before the groups (FLAT_ORDER); a check that
    reads two settings reads them by their flat names, whichever group holds them."""
    from fedpfn.core.config import FLAT_FIELDS

    assert list(FLAT_FIELDS)[:11] == ["algorithm", "server", "dataset", "model", "init", "init_sha256", "fresh_head",
                                      "projection_head", "data_root", "download", "num_clients"]  # fmt: skip
    assert parse_config({"dataset": "cifar10", "partition": "tasks"}).problems() == [
        "partition: tasks are derived from Fashion-MNIST's classes; use --dataset fmnist, not cifar10"
    ]
    assert parse_config({"num_clients": 4, "clients_per_round": 5, "min_replies": 6}).problems() == [
        "clients_per_round: 5 must be at most num_clients (4)", "min_replies: 6 must be at most clients_per_round (5)"
    ]
    assert parse_config({"model": "mlp", "personal": "head.*"}).problems()[0].startswith("personal: 'head.*' matches no")
    assert parse_config({"dataset": "mypkg.data:load", "download": True}).problems(given={"dataset", "download"}) == [
        "download: True is set, but a dataset of your own (--dataset package.module:load) loads itself"
    ]


def test_a_choice_on_the_command_line_takes_the_preset_settings_of_the_choice_it_replaced(tmp_path, capsys):
    """The quickstart preset names engine-mode threads; `--engine ray` over it runs on Ray, and says
    what of the preset it left out. A setting the command line gives itself is never dropped."""
    from fedpfn.cli.simulate import checked_config
    from fedpfn.core.settings import ConfigError

    cfg = checked_config({"config": "configs/quickstart.toml", "engine": "ray", "out": str(tmp_path / "r")})
    assert cfg.engine == Ray()
    assert "engine_mode = 'threads' left out" in capsys.readouterr().err
    preset = tmp_path / "p.toml"
    preset.write_text('partition = "dirichlet"\nalpha = 0.1\nrounds = 3\n')
    cfg = checked_config({"config": str(preset), "partition": "iid", "out": str(tmp_path / "p")})
    assert cfg.partition.method == "iid" and cfg.federation.rounds == 3
    assert "alpha = 0.1 left out" in capsys.readouterr().err
    cfg = checked_config({"config": "configs/quickstart.toml", "evaluate_clients": "0.5", "local_test_fraction": "0.2",
                          "out": str(tmp_path / "e")})  # a choice typed as text, as a flag gives it  # fmt: skip
    assert cfg.federated_eval.evaluate_clients == 0.5 and "left out" not in capsys.readouterr().err
    with pytest.raises(ConfigError, match="alpha"):  # named on the command line itself: refused as before
        checked_config({"config": str(preset), "partition": "iid", "alpha": 0.2, "out": str(tmp_path / "q")})
