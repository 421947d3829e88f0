"""An algorithm's hyperparameters, namespaced by the algorithm (fedpfn.core.hyper): a user's rule
may declare any name another algorithm has (`prox_mu`), a flag reaches each part that declares
it, and a run folder written before the namespaces (flat names in config.json and in its
checkpoint) still resumes to the same numbers."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pytest

import run_sim
from clients.fedprox import FedProxClient, FedProxParams
from fedpfn.core.config import ConfigError
from fedpfn.core.hyper import one_value_each
from fedpfn.core.tree import read_tree
from fedpfn.runtime.algorithms import flower_run_config, from_run_config, load_config, parse_config
from fedpfn.runtime.runfolder import RunFolder

TINY = ["--dataset", "fmnist", "--model", "mlp", "--num-clients", "4", "--clients-per-round", "2",
        "--partition", "iid", "--batch-size", "512"]  # fmt: skip
PROX_LIKE = '''
    from dataclasses import dataclass

    from clients.fedprox import FedProxClient
    from fedpfn.core.settings import at_least, setting

    SEEN = []  # the mu each round's rule was built with


    @dataclass(frozen=True)
    class ProxLikeParams:
        prox_mu: float = setting(0.5, "this rule's own proximal coefficient", at_least(0))


    class ProxLike(FedProxClient):
        """FedProx's term under a rule of its own: the same name, its own default."""

        name = "proxlike"
        Params = ProxLikeParams

        def __init__(self, this_round):
            super().__init__(this_round)
            SEEN.append(self.hyper.prox_mu)
'''


@pytest.fixture()
def user_rule(tmp_path, monkeypatch):
    """`proxlike:ProxLike` importable from the current folder (the registry as it was afterwards:
    conftest's registries_as_they_were)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "proxlike", raising=False)
    (tmp_path / "proxlike.py").write_text(textwrap.dedent(PROX_LIKE))
    from fedpfn.core.user_code import name_code

    name_code("proxlike:ProxLike")  # as a command names it: a test alone on its worker loads it too
    return "proxlike:ProxLike"


def test_a_users_rule_declaring_prox_mu_runs_beside_fedprox_and_the_flag_reaches_each(
    tmp_path, user_rule, monkeypatch, capsys
):
    seen_by_fedprox = []
    loss_term = FedProxClient.loss_term

    def recording(self, view, per_client):
        seen_by_fedprox.append(self.hyper.prox_mu)
        return loss_term(self, view, per_client)

    monkeypatch.setattr(FedProxClient, "loss_term", recording)
    out = tmp_path / "cmp"
    flags = ["--compare", f"fedprox,{user_rule}", "--seeds", "0", "--prox-mu", "0.1", "--rounds", "1",
             "--engine-mode", "loop"]  # the clients in this process, where the recorders are  # fmt: skip
    code = run_sim.main([*flags, *TINY, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    configs = [json.loads(path.read_text()) for path in out.glob("*-s0/config.json")]
    saved = {config["algorithm"]: config for config in configs}
    assert saved["fedprox"]["fedprox.prox_mu"] == 0.1 and "proxlike.prox_mu" not in saved["fedprox"]
    assert saved[user_rule]["proxlike.prox_mu"] == 0.1 and "fedprox.prox_mu" not in saved[user_rule]
    assert not any("prox_mu" in config for config in saved.values())  # by name alone: never saved so
    assert set(seen_by_fedprox) == {0.1} and set(sys.modules["proxlike"].SEEN) == {0.1}


def test_a_users_rule_keeps_its_own_default_and_a_core_name_is_still_refused(user_rule, tmp_path):
    cfg = load_config({"algorithm": user_rule})
    assert cfg.to_dict()["proxlike.prox_mu"] == 0.5  # its own default, not FedProx's 0.01
    (tmp_path / "seedy.py").write_text(
        "from dataclasses import dataclass\nfrom clients.base import ClientRule\n"
        "@dataclass(frozen=True)\nclass P:\n    seed: int = 1\n"
        "class Rule(ClientRule):\n    name = 'seedy'\n    Params = P\n"
    )
    from fedpfn.core.user_code import name_code

    name_code("seedy:Rule")
    with pytest.raises(ConfigError, match="declares the setting 'seed', which is a core setting; rename it"):
        parse_config({"algorithm": "seedy:Rule"})


def test_flowers_run_config_takes_a_name_alone_or_by_its_algorithm():
    """pyproject declares both: `prox-mu` ("" unless given) sets the run's algorithm's, as the flag does."""
    declared = flower_run_config()
    assert declared["prox-mu"] == "" and declared["fedprox.prox-mu"] == 0.01
    def run(**given):
        return load_config(from_run_config({**declared, "algorithm": "fedprox", **given}))

    assert run().hyper("fedprox", FedProxParams).prox_mu == 0.01
    assert run(**{"prox-mu": 0.1}).hyper("fedprox", FedProxParams).prox_mu == 0.1
    assert run(**{"fedprox.prox-mu": 0.2}).to_dict()["fedprox.prox_mu"] == 0.2
    unused = r"^moon.moon_mu: 2.0 is set, but fedprox with server fedavg does not use it$"
    with pytest.raises(ConfigError, match=unused):
        run(**{"moon.moon-mu": 2.0})
    both = "prox-mu: flwr run's run config sets prox-mu = 0.1 and fedprox.prox-mu = 0.2; give one of them"
    with pytest.raises(ConfigError, match=re.escape(both)):  # which was meant cannot be told (issue 58)
        one_value_each({**declared, "prox-mu": 0.1, "fedprox.prox-mu": 0.2}, "flwr run's run config", declared)
    one_value_each({**declared, "prox-mu": 0.1}, "flwr run's run config", declared)  # its key at pyproject's value


def test_a_preset_may_give_a_table_per_algorithm(tmp_path):
    from fedpfn.core.settings import read_toml

    preset = tmp_path / "p.toml"
    preset.write_text('algorithm = "fedpfn+fedprox"\n[fedprox]\nprox-mu = 0.3\n'
                      '[fedpfn]\nanchor-ratio = 0.2\n')  # fmt: skip
    saved = load_config(read_toml(preset)).to_dict()
    assert (saved["fedprox.prox_mu"], saved["fedpfn.anchor_ratio"]) == (0.3, 0.2)


def old_layout(folder: Path) -> None:
    """Rewrite a run folder as fedpfn wrote it before the namespaces: flat names in config.json
    and in its checkpoint's fingerprint (`prox_mu`, not `fedprox.prox_mu`)."""
    flat = lambda values: {k.rpartition(".")[2]: v for k, v in values.items()}  # noqa: E731
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(flat(config), sort_keys=True))
    tree = read_tree(folder / "checkpoint.npz")
    fingerprint = flat(tree.pop("meta")["fingerprint"])
    RunFolder(folder).save_checkpoint(fingerprint, tree)
    assert {"prox_mu", "anchor_ratio"} <= set(json.loads((folder / "config.json").read_text()))


@pytest.mark.slow  # three tiny rounds of training
def test_a_run_folder_written_before_the_namespaces_resumes_to_the_same_numbers(tmp_path, capsys):
    flags = [*TINY, "--seed", "3", "--algorithm", "fedpfn+fedprox", "--prox-mu", "0.1",
             "--anchor-ratio", "0.2"]  # fmt: skip
    assert run_sim.main([*flags, "--rounds", "2", "--out", str(tmp_path / "whole")]) == 0
    assert run_sim.main([*flags, "--rounds", "1", "--out", str(tmp_path / "old")]) == 0
    old_layout(tmp_path / "old")
    assert run_sim.main(["--resume", str(tmp_path / "old"), "--rounds", "2"]) == 0, capsys.readouterr().err
    def numbers(name: str) -> list[dict]:
        rows = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(row).items() if "seconds" not in k} for row in rows]

    assert numbers("old") == numbers("whole")
    resumed = json.loads((tmp_path / "old" / "config.json").read_text())
    assert (resumed["fedprox.prox_mu"], resumed["fedpfn.anchor_ratio"]) == (0.1, 0.2)


def test_a_comparison_reuses_a_sub_run_written_before_the_namespaces(tmp_path):
    """A kept sub-run whose config.json says `prox_mu` is the same run as one that says `fedprox.prox_mu`."""
    from fedpfn.runtime.compare import plan

    cfg = load_config({"algorithm": "fedprox", "prox_mu": 0.1, "out": str(tmp_path / "fedprox-s0")})
    cfg.run_dir.mkdir()
    flat = {name.rpartition(".")[2]: value for name, value in cfg.to_dict().items()}
    (cfg.run_dir / "config.json").write_text(json.dumps({**flat, "provenance": {"git": "abc"}}))
    (cfg.run_dir / "summary.json").write_text("{}")
    assert plan([cfg]) == ["reuse"]
    (cfg.run_dir / "config.json").write_text(json.dumps({**flat, "prox_mu": 0.2}))
    with pytest.raises(ConfigError, match="prox_mu 0.2 != 0.1"):
        plan([cfg])


def test_a_rule_reads_its_hyperparameters_as_hyper_and_the_old_name_says_so():
    from types import SimpleNamespace

    cfg = load_config({"algorithm": "fedprox", "prox_mu": 0.2})
    rule = FedProxClient(SimpleNamespace(cfg=cfg))
    assert rule.hyper == FedProxParams(prox_mu=0.2)
    with pytest.raises(AttributeError, match=r"FedProxClient.params: a rule's hyperparameters are self.hyper"):
        rule.params  # noqa: B018


@pytest.mark.parametrize(
    ("preset", "says"),
    [
        ('algorithm = "fedavg"\n[fedprox]\nprox_mu = 0.2\n',
         "error: fedprox.prox_mu: 0.2 is set, but fedavg with server fedavg does not use it"),
        ('algorithm = "fedprox"\nprox_mu = 0.1\n[fedprox]\nprox_mu = 0.2\n',
         "error: prox_mu: config '{path}' sets prox_mu = 0.1 and fedprox.prox_mu = 0.2; give one of them "
         "(prox_mu alone sets it for every part of the run that declares it)"),
    ],
    ids=["table-of-an-unused-algorithm", "name-alone-beside-its-key"],
)
def test_a_presets_table_is_never_dropped_or_overridden_without_a_word(preset, says, tmp_path, capsys):
    """A FedAvg run took a preset's [fedprox] prox_mu without a word, and `prox_mu = 0.1` beside
    `[fedprox] prox_mu = 0.2` ran with 0.1 (issue 58)."""
    path = tmp_path / "preset.toml"
    path.write_text(preset)
    assert run_sim.main(["--config", str(path), *TINY, "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == says.format(path=path) + "\n"
    assert not (tmp_path / "run").exists()
