"""The analysis commands take their shared settings from groups (issue 41, item 2): the dataset
(fedpfn.core.data.DataChoice), the model (fedpfn.core.models.ModelChoice), the mask's draw
(fedpfn.core.anchors.MaskGranularity, MaskDraw) and the data folder and device
(fedpfn.experiments.command.MachineChoice) are each declared once, in one class the commands
inherit, so they help, check and refuse the same way; each command still lists and records them
where it always did (fedpfn.experiments.command.listed).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fedpfn.core.anchors import MaskDraw, MaskGranularity
from fedpfn.core.data import DATASETS, DataChoice
from fedpfn.core.models import ModelChoice
from fedpfn.experiments import cold, command, lmc, pretrain, soup
from tests.support.commands import run_main

GROUPS = {"dataset": DataChoice, "model": ModelChoice, "granularity": MaskGranularity, "anchor_ratio": MaskDraw,
          "data_root": command.MachineChoice, "device": command.MachineChoice}  # fmt: skip
# each command's settings that a group declares
SHARED = {
    lmc.LmcConfig: ("dataset", "granularity", "data_root", "device"),
    soup.SoupConfig: ("dataset", "model", "granularity", "anchor_ratio", "data_root", "device"),
    pretrain.PretrainConfig: ("dataset", "model", "data_root", "device"),
    cold.ColdConfig: ("granularity", "anchor_ratio"),
}

OWN = {(cold.ColdConfig, "model"), (cold.ColdConfig, "data_root"),  # ColD's are its runs', read off their config.json
       (lmc.LmcConfig, "model"), (lmc.LmcConfig, "anchor_ratio")}  # the gate's: no ViT; a list of ratios to sweep


def declared_by(cls: type, name: str) -> list[type]:
    """The classes of `cls`'s hierarchy whose own body declares the field `name`."""
    return [base for base in cls.__mro__ if name in base.__dict__.get("__annotations__", {})]


def test_each_shared_setting_is_declared_once_in_a_group_the_commands_inherit() -> None:
    for cls, names in SHARED.items():
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in names:
            assert declared_by(cls, name) == [GROUPS[name]], (cls.__name__, name)
            assert fields[name] is {f.name: f for f in dataclasses.fields(GROUPS[name])}[name]
        for name, group in GROUPS.items():  # and no command declares a group's setting again
            if (cls, name) not in OWN:
                assert declared_by(cls, name) in ([], [group]), (cls.__name__, name)


def test_a_group_setting_is_listed_and_recorded_where_the_command_declared_it_before() -> None:
    """--help's order and the `config` key order of soup.json, pretrain.json and cold.json: as before the groups."""
    soup_order = [f.name for f in command.listed(soup.SoupConfig)]
    assert soup_order[:10] == ["anchor_bias", "anchor_norm", "anchor_classifier", "start", "model", "dataset",
                               "ingredients", "seeds", "anchor_ratio", "granularity"]  # fmt: skip
    assert list(command.recorded(pretrain.PretrainConfig()))[:3] == ["model", "dataset", "upstream_classes"]
    gate = list(command.recorded(lmc.LmcConfig()))  # lmc.json's config, which a study's reuse of a cell reads
    assert gate[:5] == ["anchor_bias", "anchor_norm", "anchor_classifier", "dataset", "model"]
    assert gate[gate.index("granularity") + 1] == "matchers"
    for config in (lmc.LmcConfig(), soup.SoupConfig(), pretrain.PretrainConfig()):  # where each always had them
        assert list(command.recorded(config))[-3:] == ["data_root", "device", "threads"], type(config).__name__
    record = list(command.recorded(cold.ColdConfig()))
    assert record[:3] == ["anchor_bias", "anchor_norm", "start"]
    after = record[record.index("unseen_fraction") :][:4]
    assert after == ["unseen_fraction", "anchor_ratio", "granularity", "probe_samples"]
    parser = command.build_parser("p", "", soup.SoupConfig, "x")
    flags = [a.dest for a in parser._actions if a.dest not in ("help", "out", "overwrite")]
    assert flags == soup_order[3:] + soup_order[:3]  # the anchors' scope last, as ever
    help_text = parser.format_help()
    assert "--model MODEL the start's architecture: a zoo model or timm:NAME (default: vit_tiny28)" in " ".join(
        help_text.split()
    )


def dataset_help(cls: type) -> str:
    parser = command.build_parser("p", "", cls, "x")
    return next(a.help for a in parser._actions if a.dest == "dataset")


def test_lmc_soup_and_pretrain_give_dataset_the_same_help_and_refusal(tmp_path: Path, capsys) -> None:
    configs = (lmc.LmcConfig, soup.SoupConfig, pretrain.PretrainConfig)
    assert {dataset_help(cls) for cls in configs} == {f"one of {', '.join(DATASETS)} (default: fmnist)"}
    for cls in configs:
        _, found = command.read_settings(cls, {"dataset": "imagenet"})
        assert found == [f"dataset: unknown 'imagenet'; use one of {', '.join(DATASETS)}"], cls.__name__
        assert command.read_settings(cls, {"dataset": "cifar100"})[1] == []
    for main in (lmc.main, pretrain.main):  # a refusal of a shared setting: one line, exit 2, nothing written
        code, err = run_main(main, ["--dataset", "imagenet", "--out", str(tmp_path / "out")], capsys)
        assert code == 2 and err == f"error: dataset: unknown 'imagenet'; use one of {', '.join(DATASETS)}\n"
        assert not (tmp_path / "out").exists()
