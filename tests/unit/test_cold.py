"""ColD fusion's evaluation (fedpfn.experiments.cold_eval, cold) on tiny synthetic tensors, and the
held-out tasks (partitions.tasks); the study and its refusals are tests/studies/test_fusion_studies.py.

A ColD round with two tasks trained client by client against the batched cohort is
tests/integration/test_personal.py::test_the_batched_cohort_keeps_the_heads_the_clientapp_keeps[tasks].
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpfn.core.init_file import storage_budget
from fedpfn.core.models import build_model
from fedpfn.core.training import OptimizerSpec, evaluate
from fedpfn.experiments import cold, cold_eval
from fedpfn.experiments.cold_eval import Images, ProbeSpec
from partitions.tasks import FMNIST_TASKS, HELD_OUT_TASKS, SOURCE_CLASSES, label_map
from tests.support.checks import assert_provenance
from tests.support.folders import finished_runs

SHAPE = (1, 6, 6)
SPEC = ProbeSpec(OptimizerSpec("adam", 0.01), samples=120, epochs=2, batch_size=20)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _images() -> Images:
    """Ten source classes by a learnable rule: the argmax of the first ten pixels."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(400, *SHAPE, generator=gen)
    y = x.flatten(1)[:, :SOURCE_CLASSES].argmax(1)
    return Images(x[:300], y[:300], torch.arange(100, 300), x[300:], y[300:])


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model("mlp", SHAPE, SOURCE_CLASSES, width=16)


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: t.detach().clone() for n, t in model.state_dict().items()}


def test_the_linear_probe_leaves_the_body_bit_identical_and_the_full_one_moves_it() -> None:
    model, images = _model(), _images()
    body = _state(model)
    names = cold_eval.body_names(model)
    assert names and not any(n.startswith("classifier") for n in names)
    linear = cold_eval.probe(model, body, "linear", 0, 0, images, SPEC)
    after = _state(model)
    assert all(torch.equal(after[n], body[n]) for n in names)
    assert not torch.equal(after["classifier.weight"], body["classifier.weight"])  # the head did fit
    assert linear["fit_steps"] == 2 * 6 and 0 <= linear["acc"] <= 1
    cold_eval.probe(model, body, "full", 0, 0, images, SPEC)
    assert sum(not torch.equal(model.state_dict()[n], body[n]) for n in names) == len(names)


def test_a_body_probed_twice_reads_the_same_and_another_body_does_not() -> None:
    """The zero case: every draw is the seed's, so the start arm equals the start."""
    model, images = _model(), _images()
    body = _state(model)
    first = cold_eval.held_out_figures(model, body, 3, images, SPEC)
    again = cold_eval.held_out_figures(model, body, 3, images, SPEC)
    assert first == again
    other = cold_eval.held_out_figures(model, _state(_model(1)), 3, images, SPEC)
    assert other["full_acc"] != first["full_acc"] or other["linear_acc"] != first["linear_acc"]


def test_paired_arms_read_zero_against_themselves_and_keep_their_sign() -> None:
    rows = {
        arm: [{"seed": s, "linear_acc": 0.5 + 0.01 * s, "full_acc": 0.7} for s in range(3)]
        for arm in cold_eval.ARMS
    }
    for arm in cold_eval.FUSED:
        for r in rows[arm]:
            r["own_task_acc"] = 0.8
    for s, r in enumerate(rows["shared"]):
        r["linear_acc"] += 0.02 + 0.01 * s  # shared higher on every seed
    found = {(c["label"], c["metric"]): c for c in cold.compare(rows)}
    zero = found[("plain − start", "linear_acc")]
    assert zero["mean"] == 0 and zero["ties"] == 3 and zero["equal_within"] is not None  # all equal: said so,
    assert zero["low"] is zero["high"] is zero["p_value"] is None  # with no interval or p pretending precision
    up = found[("shared − plain", "linear_acc")]
    assert up["mean"] > 0 and up["low"] > 0 and up["wins"] == 3 and up["p_holm"] >= up["p_value"]
    assert ("plain − start", "own_task_acc") not in found  # the start has no contributors' heads
    assert len(found) == len(cold_eval.COMPARISONS) * len(cold_eval.METRICS) - 1


def test_each_contributor_is_measured_with_its_own_head_on_its_task() -> None:
    model, images = _model(), _images()
    body = _state(model)
    heads = {
        k: {n: v for n, v in _state(_model(10 + k)).items() if n.startswith("classifier")} for k in range(4)
    }
    figures = cold_eval.own_task_figures(model, body, heads, images)
    for k, head in heads.items():
        model.load_state_dict({**body, **head})
        at, labels = cold_eval.in_task(images.test_y, list(FMNIST_TASKS)[k])
        assert figures["contributors"][str(k)]["acc"] == evaluate(model, images.test_x[at], labels)[1]
    assert figures["own_task_acc"] == np.mean([f["acc"] for f in figures["contributors"].values()])


def _run_folder(tmp_path: Path, model: torch.nn.Module) -> Path:
    folder = tmp_path / "run"
    (folder / "client_state").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"rounds": 2, "num_clients": 1}))
    torch.save(model.state_dict(), folder / "model_round_2.pt")
    return folder


def test_a_run_folder_gives_its_final_body_and_each_newest_head_and_no_pickle(tmp_path: Path) -> None:
    model = _model()
    folder = _run_folder(tmp_path, model)
    heads = folder / "client_state" / "0" / "personal"
    heads.mkdir(parents=True)
    for r in (1, 2):
        np.savez(heads / f"r{r}.npz", **{"classifier.bias": np.full(SOURCE_CLASSES, r, dtype=np.float32)})
    config, body, read = cold_eval.read_cold_run(folder, storage_budget(model))
    assert config["rounds"] == 2 and all(torch.equal(body[n], v) for n, v in model.state_dict().items())
    assert read[0]["classifier.bias"].tolist() == [2.0] * SOURCE_CLASSES
    np.savez(heads / "r3.npz", **{"classifier.bias": np.array([{"x": 1}], dtype=object)})
    with pytest.raises(ValueError, match="allow_pickle"):
        cold_eval.read_cold_run(folder, storage_budget(model))


def test_held_out_tasks_are_no_contributors_and_relabel_every_class() -> None:
    assert not set(HELD_OUT_TASKS) & set(FMNIST_TASKS)
    assert not set(HELD_OUT_TASKS.values()) & set(FMNIST_TASKS.values())
    assert label_map("ten-classes").tolist() == list(range(10))
    assert label_map("tops").tolist() == [0, -1, 1, -1, 2, -1, 3, -1, -1, -1]


def test_cold_json_records_its_provenance(tmp_path: Path, monkeypatch, capsys) -> None:
    """What cold.main writes beside the figures (the evaluation stubbed by the stored study's figures)."""
    stored = json.loads((Path(__file__).resolve().parents[2] / "docs" / "fusion" / "cold.json").read_text())
    figures = {key: stored[key] for key in ("config", "runs_local", "arms", "comparisons")}
    monkeypatch.setattr(cold, "evaluate_study", lambda cfg, runs, log: dict(figures))
    runs = finished_runs(tmp_path / "runs")
    assert cold.main(["--runs", str(runs), "--out", str(tmp_path / "o")]) == 0, capsys.readouterr().err
    written = json.loads((tmp_path / "o" / "cold.json").read_text())
    assert_provenance(written["provenance"])
    assert written["runs"] == str(runs) and written["run_seconds"]["independent/s2"] == 12.5
