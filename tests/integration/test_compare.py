"""The comparison command: same partitions and seeds, fedpfn.analysis.report's table, safe reuse of sub-runs."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest

from fedpfn.runtime.compare import compare, comparison_configs, plan
from fedpfn.core.config import ConfigError, RunConfig
from fedpfn.core.settings import read_toml
from fedpfn.core.hyper import dotted
from fedpfn.runtime.algorithms import flower_run_config, from_run_config, parse_config, problems
from tests.support.config import tiny_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.slow  # about 17 s idle: the comparison runs its arms, then again to reuse them
def test_compare_writes_the_report_and_reuses_only_equal_runs(tmp_path, capsys):
    """One real comparison (two tiny runs); then a reuse, then a request of other settings."""
    root = tmp_path / "cmp"
    base = tiny_config(rounds=2, out=str(root))
    report = compare(base, ["fedavg", "fedpfn"], [0], command="python run_sim.py --compare fedavg,fedpfn")
    for name in ("comparison.md", "comparison.csv", "comparison.json", "comparison.png",
                 "paired_differences.png"):
        assert (root / name).stat().st_size > 0, name
    with open(root / "comparison.csv") as fh:
        assert [row["arm"] for row in csv.DictReader(fh)] == ["fedavg", "fedpfn"]
    md = (root / "comparison.md").read_text()
    assert "Command: `python run_sim.py --compare fedavg,fedpfn`" in md
    assert "last 2 of 2 rounds" in md and "std over seeds, n-1" in md and "Student's t" in md
    assert report.baseline == "fedavg" and all(0 <= arm.final[0] <= 1 for arm in report.arms)
    written = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
    capsys.readouterr()

    compare(base, ["fedavg", "fedpfn"], [0], command="again")
    assert capsys.readouterr().out.count("with the same settings, reused") == 2

    with pytest.raises(ConfigError) as refused:
        compare(tiny_config(rounds=3, lr=0.1, out=str(root)), ["fedavg", "fedpfn"], [0], command="other")
    lines = str(refused.value).splitlines()
    assert lines == [
        f"{root / name} holds a run with other settings: lr 0.05 != 0.1, rounds 2 != 3; use another --out"
        for name in ("fedavg-s0", "fedpfn-s0")
    ]
    assert json.loads((root / "comparison_config.json").read_text())["command"] == "again"  # untouched
    assert (root / "comparison.csv").read_bytes() == written["comparison.csv"]


def write_config(cfg: RunConfig, finished: bool, **changes) -> None:
    """A sub-run folder as a run leaves it: config.json, and summary.json if it finished."""
    cfg.run_dir.mkdir(parents=True)
    config = {**cfg.to_dict(), "out": str(cfg.run_dir.resolve()), "provenance": {"git": "abc"}, **changes}
    (cfg.run_dir / "config.json").write_text(json.dumps(config))
    if finished:
        (cfg.run_dir / "summary.json").write_text("{}")


def test_plan_reuses_resumes_or_starts_only_runs_of_equal_settings(tmp_path):
    configs = comparison_configs(tiny_config(out=str(tmp_path / "cmp")), ["fedavg", "fedpfn"], [0, 1])
    write_config(configs[0], finished=True, overwrite=True)  # out, overwrite, provenance may differ
    write_config(configs[1], finished=False)
    assert plan(configs) == ["reuse", "resume", "start", "start"]
    write_config(configs[2], finished=True, anchor_ratio=0.2)
    write_config(configs[3], finished=False, alpha=0.3, batch_size=32)
    with pytest.raises(ConfigError) as refused:
        plan(configs)
    assert str(refused.value).splitlines() == [  # every refusal at once, before anything runs
        f"{configs[2].run_dir} holds a run with other settings: anchor_ratio 0.2 != 0.4; use another --out",
        f"{configs[3].run_dir} holds a run with other settings: alpha 0.3 != 0.5, batch_size 32 != 64; "
        "use another --out",
    ]


def test_a_damaged_sub_run_config_is_refused(tmp_path):
    configs = comparison_configs(tiny_config(out=str(tmp_path / "cmp")), ["fedavg"], [0])
    configs[0].run_dir.mkdir(parents=True)
    (configs[0].run_dir / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"fedavg-s0 holds a damaged config.json .*; use another --out"):
        plan(configs)


@pytest.mark.parametrize(
    ("seeds", "message"),
    [
        ([-1], "seeds: -1 is out of range"),
        ([2**32], "seeds: 4294967296 is out of range"),
        ([0, 3, 0], "seeds: 0 is given twice"),
        ([1.5], "seeds: '1.5' is not a whole number"),
        (["a"], "seeds: 'a' is not a whole number"),
        ([], "seeds: none given"),
    ],
)
def test_bad_seed_lists_are_refused_before_anything_is_written(tmp_path, seeds, message):
    base = tiny_config(out=str(tmp_path / "cmp"))
    with pytest.raises(ConfigError) as refused:
        compare(base, ["fedavg"], seeds, command="pytest")
    assert str(refused.value).startswith(message) and "0 to 4294967295, each once" in str(refused.value)
    assert not (tmp_path / "cmp").exists()


def test_compare_refuses_bad_algorithms_and_unused_settings_before_running(tmp_path):
    base = tiny_config(out=str(tmp_path / "cmp"))
    with pytest.raises(ConfigError, match="algorithm: unknown 'fedbar'"):
        comparison_configs(base, ["fedavg", "fedbar"], [0, 1])
    with pytest.raises(ConfigError, match="compare: 'fedavg' is given twice"):
        compare(base, ["fedavg", "fedpfn", "fedavg"], [0], command="pytest")
    with pytest.raises(ConfigError, match="prox_mu: 0.5 is set, but none of fedavg, fedpfn uses it"):
        comparison_configs(dataclasses.replace(base, hparams={"prox_mu": 0.5}), ["fedavg", "fedpfn"], [0])
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("preset", sorted(p.name for p in CONFIGS.glob("*.toml")))
def test_presets_are_valid(preset):
    values = read_toml(CONFIGS / preset)
    cfg = parse_config(values)
    assert cfg.problems() == []


def test_paper_preset_decays_lr_each_round():
    cfg = parse_config(read_toml(CONFIGS / "cifar10_paper.toml"))
    assert cfg.lr_at(1) == 0.1 and abs(cfg.lr_at(101) - 0.1 * 0.99**100) < 1e-12


def test_flower_app_config_declares_every_setting():
    """The SuperLink refuses --run-config keys the app does not declare."""
    import tomllib

    pyproject = tomllib.loads((CONFIGS.parent / "pyproject.toml").read_text())
    declared = dotted(pyproject["tool"]["flwr"]["app"]["config"])  # fedprox.prox-mu, as Flower flattens it
    assert set(declared) == set(flower_run_config())
    assert problems(parse_config(from_run_config(declared))) == []
