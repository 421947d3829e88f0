"""`flwr run .` on a simulation SuperLink of its own: a preset, the same numbers as run_sim.py, failures.

One SuperLink (`flower_link.simulation_superlink`) serves the module and is stopped at the
end. Flower's CLI exits 0 once a run is submitted, even with `--stream` and even when the
ServerApp raises; the run's status (`flwr ls`) is where a failure shows, with fedpfn's
one-line reason.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

from fedpfn.core.config import RunConfig
from fedpfn.core.settings import read_toml
from fedpfn.runtime.algorithms import from_run_config, load_config, parse_config, validated
from fedpfn.runtime.runfolder import RunFolder
from tests.support.config import tiny_config
from tests.support.flower_link import BIN, Link, simulation_superlink

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.toml"
FEDERATION = "num-supernodes=4 client-resources-num-cpus=1"
RUN_TIMEOUT = 420  # seconds for one `flwr run --stream`; ~40-90 s on 2 busy cores


@pytest.fixture(scope="module")
def link(tmp_path_factory) -> Iterator[Link]:
    with simulation_superlink(tmp_path_factory.mktemp("flwr")) as running:
        yield running


def flwr(link: Link, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "flwr"), *args], cwd=ROOT, env=link.env, capture_output=True, text=True, timeout=timeout
    )


def flwr_run_preset(link: Link) -> tuple[subprocess.CompletedProcess, int]:
    """`flwr run . --run-config configs/quickstart.toml ... --stream`, as the preset's comment says."""
    done = flwr(
        link, "run", ".", "--run-config", str(QUICKSTART), "--federation-config", FEDERATION, "--stream",
        timeout=RUN_TIMEOUT,
    )  # fmt: skip
    started = [line for line in done.stdout.splitlines() if line.startswith("Successfully started run")]
    assert started, done.stdout + done.stderr
    return done, int(started[0].split()[-1])


def run_status(link: Link, run_id: int) -> dict:
    listed = flwr(link, "ls", "--run-id", str(run_id), "--format", "json")
    return json.loads(listed.stdout)["runs"][0]


def stable_rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


@pytest.fixture(scope="module")
def preset_run(link) -> Path:
    """The quickstart preset through `flwr run`, finished: its run folder."""
    done, run_id = flwr_run_preset(link)
    status = run_status(link, run_id)
    assert status["status"] == "finished:completed", (status, done.stdout[-3000:])
    return link.folder / read_toml(QUICKSTART)["out"]


def test_quickstart_preset_is_the_tiny_test_setting():
    preset = load_config(read_toml(QUICKSTART))
    assert preset.fingerprint() == tiny_config().fingerprint()


@pytest.mark.slow
def test_flwr_run_and_run_sim_give_the_same_metrics(preset_run, tmp_path, capsys):
    import run_sim

    assert run_sim.main(["--config", str(QUICKSTART), "--out", str(tmp_path / "sim")]) == 0
    assert stable_rows(preset_run) == stable_rows(tmp_path / "sim")
    assert len(stable_rows(preset_run)) == 2
    deployed, simulated = (RunFolder(d).read_config() for d in (preset_run, tmp_path / "sim"))
    assert parse_config(deployed).fingerprint() == parse_config(simulated).fingerprint()
    assert deployed["client_gpus"] is None and simulated["client_gpus"] is None  # auto: the batched engine's GPU if any


@pytest.mark.slow
def test_a_server_app_error_is_the_runs_status_with_fedpfns_reason(link, preset_run):
    """A second run into the finished folder: refused, reported by `flwr ls`, the folder untouched."""
    before = (preset_run / "metrics.jsonl").read_bytes()
    done, run_id = flwr_run_preset(link)
    reason = f"out: '{preset_run}' holds a finished run; set overwrite=true in --run-config to replace it"
    assert reason in done.stdout
    assert done.returncode == 0  # Flower's CLI: 0 once submitted; the status below is the verdict
    status = run_status(link, run_id)
    assert status["status"] == "finished:failed"
    assert reason in status["status-details"]
    assert (preset_run / "metrics.jsonl").read_bytes() == before


@pytest.mark.slow
def test_forgotten_num_supernodes_is_the_runs_status_at_once_and_no_folder_is_made(link):
    """Flower's default federation has 2 nodes: refused before Ray's clients answer, out untouched."""
    config = "num-clients=4 clients-per-round=2 rounds=1 model='mlp' partition='iid' out='forgotten'"
    done = flwr(link, "run", ".", "--run-config", config, "--stream", timeout=RUN_TIMEOUT)
    started = [line for line in done.stdout.splitlines() if line.startswith("Successfully started run")]
    status = run_status(link, int(started[0].split()[-1]))
    assert status["status"] == "finished:failed"
    # the streamed log says what failed first, if Flower's runtime did before the ServerApp's refusal
    assert "num-clients is 4 but this simulation has 2 SuperNodes" in status["status-details"], done.stdout[-4000:]
    assert 'num-supernodes=4' in status["status-details"]
    assert status["elapsed"] < 60, status  # not after minutes of waiting for the nodes' answers
    assert not (link.folder / "forgotten").exists()


def test_every_preset_is_accepted_by_flower_and_by_run_sim_alike():
    """Flower's own reading of `--run-config FILE` (keys checked against pyproject) and run_sim's."""
    from flwr.common.config import flatten_dict, fuse_dicts, parse_config_args

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    for preset in sorted((ROOT / "configs").glob("*.toml")):
        fused = fuse_dicts(flatten_dict(declared), parse_config_args([str(preset)]))  # as the SuperLink does
        through_flower = parse_config(from_run_config(fused))  # as the ServerApp reads it
        through_run_sim = parse_config(read_toml(preset))
        assert validated(through_flower).to_dict() == validated(through_run_sim).to_dict(), preset.name
        assert through_run_sim.problems() == [], preset.name


def test_make_runs_preset_is_bare_run_sims_experiment():
    """configs/fmnist_default.toml differs from the defaults (pyproject's too) only in `out`."""
    default = parse_config(read_toml(ROOT / "configs" / "fmnist_default.toml"))
    assert validated(default).fingerprint() == validated(RunConfig()).fingerprint()
