"""`--engine-mode auto` on the CPU: the batched engine times threads and vmap on round 1's
clients and takes the faster; config.json records it, the header says why."""

from __future__ import annotations

import json
import os
import re

from conftest import tiny_config
from fedpfn.runtime.engines.auto_mode import PROBE_STEPS, TIMED_FROM, choose_mode
from fedpfn.runtime.simulation import simulate


def test_auto_times_both_modes_and_takes_the_faster(tmp_path):
    for model in ("mlp", "cnn"):
        cfg = tiny_config(model=model, num_clients=8, clients_per_round=TIMED_FROM, out=str(tmp_path / model))
        choice = choose_mode(cfg)
        times = {name: float(value) for name, value in re.findall(r"(loop|threads|vmap) ([0-9.]+) s", choice.why)}
        assert set(times) == {"loop", "threads", "vmap"} and all(t > 0 for t in times.values()), choice.why
        assert times[choice.mode] == min(times.values()), choice.why  # the fastest (ties: as shown, to 0.01 s)
        assert f"x {PROBE_STEPS} steps" in choice.why
        assert not (tmp_path / model).exists()  # the probe neither writes nor creates the run folder


def test_a_small_round_takes_the_fixed_rule():
    assert choose_mode(tiny_config(model="mlp", clients_per_round=2)).mode == "vmap"
    cnn = choose_mode(tiny_config(model="cnn", clients_per_round=2))
    assert cnn.mode == "threads" and f"fewer than {TIMED_FROM} clients a round" in cnn.why
    untimed = choose_mode(tiny_config(model="cnn", clients_per_round=TIMED_FROM), timed=False)
    assert untimed.mode == "threads" and "not timed here" in untimed.why


def test_the_run_records_the_mode_it_chose_and_says_why(tmp_path, capsys):
    out = tmp_path / "run"
    cfg = tiny_config(model="mlp", num_clients=8, clients_per_round=TIMED_FROM, rounds=1, out=str(out))
    simulate(cfg, show_progress=True)
    saved = json.loads((out / "config.json").read_text())
    recorded, shown = saved["engine_mode"], capsys.readouterr().out
    assert recorded in ("loop", "threads", "vmap")
    assert f"(auto: {recorded}, the fastest for round 1's" in shown, shown
    assert saved["client_cpus"] == (float(os.cpu_count()) if recorded == "loop" else 1.0)
