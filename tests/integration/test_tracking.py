"""Tracking, per-client records, provenance and the terminal, on one real Ray simulation.

One run (`tracked`) with failures, `--eval-every 2`, local test splits, TensorBoard and W&B
(offline) feeds most tests; one resume of a copy of it is the second and last simulation.
The rest needs no Ray: the header is checked with Ray's start replaced by a probe.
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import re
import shutil
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import torch

from fedpfn.core.cache import client_indices, local_split
from fedpfn.core.config import ConfigError
from fedpfn.runtime.algorithms import parse_config
from fedpfn.runtime.progress import Progress
from fedpfn.runtime.runfolder import RunFolder
from fedpfn.runtime.simulation import resume_config, simulate
from fedpfn.runtime.tracking import local_test_summary
from tests.support.commands import no_engine_starts
from tests.support.config import tiny_config

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 3
HAS_WANDB = importlib.util.find_spec("wandb") is not None  # in the test extra; optional elsewhere


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def wandb_env(mp: pytest.MonkeyPatch, root: Path) -> None:
    """Offline, quiet, and nothing written outside the test's folders."""
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}.items():
        mp.setenv(name, value)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        mp.setenv(name, str(root / name.lower()))


@pytest.fixture(scope="module")
def tracked(tmp_path_factory) -> dict[str, Any]:
    """3 rounds, 3 of 4 clients a round, seeded failures, evaluation every 2 rounds."""
    root = tmp_path_factory.mktemp("tracked")
    cfg = tiny_config(
        rounds=ROUNDS, clients_per_round=3, simulate_failures=0.3, eval_every=2, local_test_fraction=0.2,
        tensorboard=True, wandb=HAS_WANDB, out=str(root / "run"),
    )  # fmt: skip
    terminal = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, redirect_stdout(terminal):
        wandb_env(mp, root)
        simulate(cfg, show_progress=True)
    run = Path(cfg.output.out)
    return {
        "cfg": cfg,
        "run": run,
        "terminal": terminal.getvalue(),
        "metrics": jsonl(run / "metrics.jsonl"),
        "clients": jsonl(run / "clients.jsonl"),
    }


# --- clients.jsonl, eval-every, local test ------------------------------------------------------


def test_client_rows_are_the_rounds_successful_clients(tracked):
    assert sum(r["num_failures"] for r in tracked["metrics"]) > 0, "the seed should fail somebody"
    for record in tracked["metrics"]:
        rows = [c for c in tracked["clients"] if c["round"] == record["round"]]
        lost = set(record["failed_partitions"]) | set(record["missing_partitions"])
        expected = set(record["clients"]) - lost
        assert sorted(c["partition_id"] for c in rows) == sorted(expected)
        assert len(rows) == record["num_clients"]
        assert sum(c["bytes_up"] for c in rows) == record["bytes_up"]
        for c in rows:
            train, _ = local_split(tracked["cfg"], c["partition_id"])
            assert c["num_examples"] == len(train)
            assert math.isfinite(c["train_loss"]) and 0 <= c["train_accuracy"] <= 1 and c["train_seconds"] > 0


def test_eval_every_rows_null_and_the_last_round_evaluated(tracked):
    evaluated = [r["round"] for r in tracked["metrics"] if r["test_accuracy"] is not None]
    assert evaluated == [2, 3]
    first = tracked["metrics"][0]
    assert first["test_accuracy"] is None and first["test_loss"] is None
    summary = json.loads((tracked["run"] / "summary.json").read_text())
    assert summary["last5_window"] == "last 2 of 2 evaluated rounds"


def test_local_test_before_after_and_round_means(tracked):
    for record in tracked["metrics"]:
        rows = [c for c in tracked["clients"] if c["round"] == record["round"]]
        for key in ("local_accuracy_before", "local_accuracy_after"):
            values = [c[key] for c in rows]
            assert all(0 <= v <= 1 for v in values)
            assert record[f"{key}_mean"] == pytest.approx(sum(values) / len(values))
            assert record[f"{key}_worst10"] == pytest.approx(min(values))  # 10 % of 2-3 clients: one
    first = [c for c in tracked["clients"] if c["round"] == 1]
    # round 1's global model is the untrained one: near chance before, far better after
    assert all(c["local_accuracy_before"] < 0.3 < c["local_accuracy_after"] for c in first)


def test_local_split_is_seeded_disjoint_and_complete():
    cfg = tiny_config(local_test_fraction=0.2)
    for pid, whole in enumerate(client_indices(cfg)):
        train, test = local_split(cfg, pid)
        assert len(test) == round(0.2 * len(whole))
        assert set(train.tolist()).isdisjoint(test.tolist())
        assert sorted(train.tolist() + test.tolist()) == whole.tolist()
    other = tiny_config(local_test_fraction=0.2, seed=1)
    assert not torch.equal(local_split(cfg, 0)[1], local_split(other, 0)[1])
    none = tiny_config()
    assert torch.equal(local_split(none, 0)[0], client_indices(none)[0]) and len(local_split(none, 0)[1]) == 0


def test_worst_ten_percent_is_the_mean_of_the_lowest_tenth():
    rows = [{"local_accuracy_before": v / 100, "local_accuracy_after": 0.5} for v in range(20)]
    summary = local_test_summary(rows)
    assert summary["local_accuracy_before_worst10"] == pytest.approx(0.005)  # mean of 0.00 and 0.01
    assert summary["local_accuracy_before_mean"] == pytest.approx(0.095)
    assert local_test_summary([])["local_accuracy_after_mean"] is None


# --- TensorBoard and W&B ------------------------------------------------------------------------


def test_tensorboard_events_read_back_with_tensorboards_reader(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tracked["run"] / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()

    def series(tag: str) -> list[tuple[int, float]]:
        return [(e.step, e.value) for e in events.Scalars(tag)]

    metrics = tracked["metrics"]
    assert series("test/accuracy") == [(r["round"], pytest.approx(r["test_accuracy"])) for r in metrics[1:]]
    assert series("train/loss") == [(r["round"], pytest.approx(r["train_loss"])) for r in metrics]
    assert [v for _, v in series("clients/failures")] == [r["num_failures"] for r in metrics]
    assert [v for _, v in series("comm/bytes_up")] == [pytest.approx(r["bytes_up"]) for r in metrics]
    assert len(series("time/round_seconds")) == ROUNDS
    for row in tracked["clients"]:
        steps = dict(series(f"client_train_loss/{row['partition_id']}"))
        assert steps[row["round"]] == pytest.approx(row["train_loss"])
        after = dict(series(f"client_local_accuracy_after/{row['partition_id']}"))
        assert after[row["round"]] == pytest.approx(row["local_accuracy_after"])


def test_tensorboard_hparams_hold_the_runs_settings_beside_its_final_accuracy(tracked):
    """The HPARAMS tab compares runs by what they computed: settings in, placement and folder out."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    (session,) = [path for path in (tracked["run"] / "tensorboard").iterdir() if path.is_dir()]
    events = EventAccumulator(str(session))
    events.Reload()
    start = HParamsPluginData.FromString(events.PluginTagToContent("hparams")["_hparams_/session_start_info"])
    hparams = {k: getattr(v, v.WhichOneof("kind")) for k, v in start.session_start_info.hparams.items()}
    cfg = tracked["cfg"]
    assert hparams["algorithm"] == cfg.algorithm and hparams["clients_per_round"] == cfg.federation.clients_per_round
    assert hparams["simulate_failures"] == pytest.approx(cfg.federation.simulate_failures) and hparams["eval_every"] == 2
    assert not {"out", "client_cpus", "tensorboard", "checkpoint_every"} & set(hparams)
    summary = json.loads((tracked["run"] / "summary.json").read_text())
    (final,) = events.Scalars("final/final_test_accuracy")
    assert final.value == pytest.approx(summary["final_test_accuracy"])


@pytest.mark.skipif(not HAS_WANDB, reason="wandb is not installed (pip install -e '.[tracking]')")
def test_wandb_offline_writes_its_run_under_the_folder(tracked):
    files = list((tracked["run"] / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    data = files[0].read_bytes()
    for key in (b"test/accuracy", b"train/loss", b"client_train_loss/", b"local_test/accuracy_after_mean",
                b"seed 0"):  # fmt: skip
        assert key in data, key


def test_wandb_groups_a_comparisons_runs_and_one_settings_seeds(tmp_path):
    from fedpfn.runtime.tracking import wandb_group

    (tmp_path / "cmp").mkdir()
    (tmp_path / "cmp" / "comparison_config.json").write_text("{}")
    cfg = tiny_config(seed=3)
    assert wandb_group(cfg, RunFolder(tmp_path / "cmp" / "fedpfn-s3")) == "cmp"
    assert wandb_group(cfg, RunFolder(tmp_path / "fedavg-fmnist-mlp-0a1b2c3d-s3")) == "fedavg-fmnist-mlp-0a1b2c3d"


def test_missing_tracking_packages_refused_before_anything(tmp_path, monkeypatch):
    for name in ("tensorboardX", "torch.utils.tensorboard", "wandb"):
        monkeypatch.setitem(sys.modules, name, None)  # import now fails as if not installed
    out = tmp_path / "run"
    with pytest.raises(ConfigError) as err:
        simulate(tiny_config(tensorboard=True, wandb=True, out=str(out)), show_progress=False)
    assert str(err.value).splitlines() == [
        "--tensorboard needs the tensorboardX (or tensorboard) package: pip install -e '.[tracking]'",
        "--wandb needs the wandb package: pip install -e '.[tracking]'",
    ]
    assert not out.exists()


# --- terminal, run.log, provenance --------------------------------------------------------------


def test_terminal_header_rounds_with_eta_and_summary(tracked):
    lines = tracked["terminal"].splitlines()
    rounds = [line for line in lines if line.startswith("round ")]
    assert len(rounds) == ROUNDS
    first_round = lines.index(rounds[0])
    header = "\n".join(lines[:first_round])
    for part in ("fedavg on server fedavg", "fmnist mlp", "4, 3 a round, iid", "1..3", str(tracked["run"]),
                 "batched engine in this process", "tensorboard"):  # fmt: skip
        assert part in header, part
    assert all("ETA" in line for line in rounds[:-1]) and "ETA" not in rounds[-1]
    assert "test acc    -" in rounds[0] and "local " in rounds[0]
    done = "\n".join(lines[lines.index(rounds[-1]) + 1 :])
    assert "done 3 rounds" in done and "over the last 2 of 2 evaluated rounds" in done and " MB" in done


def test_run_log_keeps_what_the_terminal_showed_and_the_warnings(tracked):
    log = (tracked["run"] / "run.log").read_text()
    for line in tracked["terminal"].splitlines():
        if line.startswith(("round ", "fedpfn ", "done ")):
            assert line in log
    failed = sum(r["num_failures"] for r in tracked["metrics"])
    assert len(re.findall(r"^warning: round \d+: partition \d+ failed", log, re.M)) == failed


def test_provenance_in_config_json_and_not_in_the_settings(tracked):
    folder = RunFolder(tracked["run"])
    stored = json.loads((tracked["run"] / "config.json").read_text())
    provenance = stored["provenance"]
    assert set(provenance) >= {"started", "command", "host", "git", "python", "packages", "device"}
    assert set(provenance["packages"]) >= {"flwr", "torch", "ray", "numpy"}
    assert all(provenance["packages"][name] for name in ("flwr", "torch", "ray", "numpy"))
    if (ROOT / ".git").exists():  # a checkout (CI's clone): its commit and whether files changed
        assert re.fullmatch(r"[0-9a-f]{40}", provenance["git"]["commit"])
        assert isinstance(provenance["git"]["dirty"], bool)
    else:  # an unpacked copy: no commit to name, and none made up
        assert provenance["git"] is None
    assert provenance["device"]["cpus"] >= 1
    assert "provenance" not in folder.read_config() and folder.read_provenance() == provenance
    assert parse_config(folder.read_config()).fingerprint() == tracked["cfg"].fingerprint()


def test_resume_keeps_provenance_and_appends_to_run_log(tracked, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tracked["run"], run, ignore=shutil.ignore_patterns("wandb"))
    cfg = resume_config(str(run), {"rounds": ROUNDS + 1, "wandb": False})
    assert cfg.tracking.tensorboard and not cfg.tracking.wandb
    simulate(cfg, resume=True, show_progress=False)
    provenance = RunFolder(run).read_provenance()
    assert provenance["started"] == RunFolder(tracked["run"]).read_provenance()["started"]
    assert len(provenance["resumes"]) == 1 and provenance["resumes"][0]["packages"]
    log = (run / "run.log").read_text()
    assert log.count("\n== ") + log.startswith("== ") == 2 and "(resumed after 3)" in log
    assert [r["round"] for r in jsonl(run / "clients.jsonl")][-1] == ROUNDS + 1
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4]


def test_header_is_printed_before_the_engine_starts(tmp_path, monkeypatch, capsys):
    seen: list[str] = []

    def ray_would_start(*args: Any) -> None:
        seen.append(capsys.readouterr().out)
        raise KeyboardInterrupt  # stop here: nothing after the engine's start is needed

    no_engine_starts(monkeypatch, ray_would_start)
    cfg = tiny_config(out=str(tmp_path / "run"))
    with pytest.raises(KeyboardInterrupt):
        simulate(cfg, show_progress=True)
    assert len(seen) == 1
    assert "fedpfn fedavg on server fedavg" in seen[0] and f"out        {tmp_path / 'run'}" in seen[0]
    assert "fedpfn fedavg on server fedavg" in (tmp_path / "run" / "run.log").read_text()


def test_eta_is_the_mean_round_time_times_the_rounds_left(tmp_path, capsys):
    progress = Progress(5, tmp_path / "run.log", show=True)
    record = dict(
        test_accuracy=0.5, test_loss=1.0, train_loss=1.0, num_clients=2, num_failures=0, skipped=False
    )
    progress.round_done({**record, "round": 1, "seconds": 2.0}, [])
    progress.round_done({**record, "round": 2, "seconds": 4.0}, [])
    progress.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("ETA 8s") and lines[1].endswith("ETA 9s")  # 2 s x 4, 3 s x 3


def test_help_shows_one_default_each_and_no_tuples():
    from run_sim import build_parser

    text = build_parser().format_help()
    options = re.split(r"\n  (?=--)", text.split("options:", 1)[1])
    assert len(options) > 40
    for option in options:
        assert option.count("(default") <= 1, option
        assert not re.search(r"\(\s*'|,\)", option), option  # no tuple reprs
    assert "--tensorboard" in text and "--local-test-fraction" in text
