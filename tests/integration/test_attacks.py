"""Simulated attacks (issue 43, item 4): a seeded fraction of the clients is malicious.

What a user relies on: which clients are malicious is the run seed's alone and clients.jsonl says
so; each attacker sends what its attack says (sign flip g - (w - g), scaled g + S (w - g),
gaussian g + S N(0, 1), label flip: trained on y -> C-1-y) while the honest clients' replies
are unchanged; the batched engine's program and the ClientApp send the same numbers; an
attack setting the run cannot use is refused in one line; a robust aggregator holds where
FedAvg falls; and a user's own attack runs by dotted path, under the guard of a user's rule.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, RecordDict

import run_sim
from clients.attacks import ATTACKS, AttackParams, attack_of, malicious_partitions
from fedpfn.core import protocol
from fedpfn.core.cache import initial_model
from fedpfn.core.groups import Vmap
from fedpfn.runtime.algorithms import build_strategy, client_rules
from fedpfn.runtime.engines.prepared import ClientJob
from fedpfn.runtime.engines.program import CohortProgram, local_round
from fedpfn.runtime.server import train_config, with_accepted_round
from tests.support.config import tiny_config
from tests.support.rounds import NodeGrid

CPU = torch.device("cpu")
MODEL_ATTACKS = ("sign-flip", "scaled", "gaussian")


def attacked(attack: str, **overrides):
    """8 clients, half of them malicious, one 500-example step each: quick and moving."""
    values = dict(num_clients=8, clients_per_round=8, batch_size=500, attack=attack, attack_fraction=0.5)
    return tiny_config(**{**values, **overrides})


def round_one(cfg, dtype=torch.float64, chosen: list[int] | None = None):
    """Round 1's messages to every client (or to `chosen`, as many as a round takes), the model in `dtype`."""
    net = initial_model(cfg)
    arrays = protocol.to_numpy(ArrayRecord(net.state_dict()))
    arrays = {n: a.astype(np.float64 if dtype == torch.float64 else np.float32) for n, a in arrays.items()}
    strategy = build_strategy(cfg, net)
    chosen = list(range(cfg.federation.num_clients)) if chosen is None else chosen
    messages = strategy.configure_train(1, protocol.to_array_record(arrays), train_config(cfg, 1), NodeGrid(chosen))
    return arrays, [with_accepted_round(m, 0) for m in messages]


def clientapp(cfg, message) -> dict[str, np.ndarray]:
    reply = local_round(client_rules(cfg), cfg, message.metadata.dst_node_id, RecordDict(), CPU, message.content)
    return protocol.to_numpy(reply.array_records[protocol.ARRAYS])


def test_the_malicious_clients_are_the_seeds_and_clients_jsonl_marks_them(tmp_path):
    params = AttackParams(attack="sign-flip", attack_fraction=0.3)
    drawn = malicious_partitions(params, 7, 20)
    assert len(drawn) == 6 and drawn == malicious_partitions(params, 7, 20)
    assert drawn != malicious_partitions(params, 8, 20)
    out = tmp_path / "run"
    args = ["--model", "mlp", "--num-clients", "4", "--clients-per-round", "4", "--rounds", "1", "--partition", "iid",
            "--batch-size", "500", "--attack", "sign-flip", "--attack-fraction", "0.5", "--out", str(out)]  # fmt: skip
    assert run_sim.main(args) == 0
    rows = [json.loads(line) for line in (out / "clients.jsonl").read_text().splitlines()]
    expected = malicious_partitions(AttackParams(attack="sign-flip", attack_fraction=0.5), 0, 4)
    assert {row["partition_id"] for row in rows if row["malicious"]} == expected and len(expected) == 2
    config = json.loads((out / "config.json").read_text())
    assert (config["attacks.attack"], config["attacks.attack_fraction"], config["attacks.attack_scale"]) == ("sign-flip", 0.5, 1.0)


def test_a_run_without_an_attack_records_none_of_its_settings():
    cfg = tiny_config()
    assert not {"attacks.attack", "attacks.attack_fraction", "attacks.attack_scale"} & set(cfg.fingerprint())
    assert attacked("scaled").fingerprint()["attacks.attack_scale"] == 10.0


@pytest.mark.parametrize("attack", MODEL_ATTACKS)
def test_each_attacker_sends_what_its_attack_says_and_the_honest_send_as_before(attack):
    cfg = attacked(attack, attack_scale=3.0)
    honest_cfg = tiny_config(num_clients=8, clients_per_round=8, batch_size=500)
    sent, messages = round_one(cfg)
    malicious = malicious_partitions(attack_of(cfg), cfg.seed, cfg.federation.num_clients)
    assert len(malicious) == 4
    for message in messages:
        pid = message.metadata.dst_node_id
        reply, trained = clientapp(cfg, message), clientapp(honest_cfg, message)
        for name, w in trained.items():
            g = sent[name]
            if pid not in malicious:
                assert np.array_equal(reply[name], w), (pid, name)
            elif attack == "sign-flip":
                np.testing.assert_allclose(reply[name], g - 3.0 * (w - g), rtol=0, atol=1e-12)
            elif attack == "scaled":
                np.testing.assert_allclose(reply[name], g + 3.0 * (w - g), rtol=0, atol=1e-12)
        if attack == "gaussian" and pid in malicious:
            noise = np.concatenate([(reply[n] - sent[n]).ravel() for n in sent])
            assert abs(noise.std() / 3.0 - 1) < 0.01 and abs(noise.mean()) < 5 * 3.0 / noise.size**0.5  # 200k draws


def test_a_label_flipper_trains_on_flipped_labels_and_the_honest_on_their_own():
    cfg = attacked("label-flip")
    flippers = malicious_partitions(attack_of(cfg), cfg.seed, cfg.federation.num_clients)
    _, messages = round_one(cfg)
    jobs = [ClientJob(p, RecordDict(), 0) for p in range(cfg.federation.num_clients)]
    cohort = CohortProgram(client_rules(cfg), cfg, messages[0].content, CPU, jobs)
    y = cohort.clients[0].data.y
    for k in range(cfg.federation.num_clients):
        rows = cohort.clients[k].batches[0]
        want = 9 - y[rows] if k in flippers else y[rows]
        assert torch.equal(cohort.load(k, rows)[1], want)
    stacked = torch.stack([cohort.clients[k].batches[0][:50] for k in range(cfg.federation.num_clients)])
    targets = cohort.load(0, stacked, list(range(cfg.federation.num_clients)))[1]
    for k in range(cfg.federation.num_clients):  # a vmapped program's stack: each row its own client's labels
        assert torch.equal(targets[k], 9 - y[stacked[k]] if k in flippers else y[stacked[k]])
    assert torch.equal(cohort.load(0, stacked, [k for k in range(8) if k not in flippers] * 2)[1], y[stacked])


@pytest.mark.parametrize("attack", [*MODEL_ATTACKS, "label-flip"])
@pytest.mark.parametrize("algorithm", ["fedavg", "fedpfn+scaffold"])
def test_the_batched_program_sends_what_the_clientapp_sends(attack, algorithm):
    """Six of 30 clients (2000 examples, 10 steps each), some of them malicious, as one vmapped program."""
    cfg = attacked(attack, algorithm=algorithm, batch_size=200, num_clients=30, clients_per_round=6)
    malicious = malicious_partitions(attack_of(cfg), cfg.seed, cfg.federation.num_clients)
    honest = [p for p in range(cfg.federation.num_clients) if p not in malicious]
    # the round's six named: Flower's sampling of 6 of 30 draws from the process's global random state,
    # so which were malicious depended on the tests run before in the same worker
    messages = round_one(cfg, chosen=sorted(malicious)[:3] + honest[:3])[1]
    jobs = [ClientJob(m.metadata.dst_node_id, RecordDict(), 0) for m in messages]
    result = CohortProgram(client_rules(cfg), cfg, messages[0].content, CPU, jobs).train(Vmap)
    assert len(jobs) == 6 and 0 < len(malicious & {job.partition_id for job in jobs}) < 6
    for k, message in enumerate(messages):
        batched = protocol.to_numpy(result.reply_content(k).array_records[protocol.ARRAYS])
        for name, value in clientapp(cfg, message).items():
            np.testing.assert_allclose(batched[name], value, rtol=1e-9, atol=1e-9, err_msg=f"client {k} {name}")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--attack-fraction", "0.3"], "attack_fraction: 0.3 is set, but only --attack uses it"),
        (["--attack", "label-flip", "--attack-scale", "5"], "only --attack sign-flip, scaled or gaussian uses it"),
        (["--attack", "scaled", "--attack-scale", "0"], "attack_scale: 0.0 must be > 0"),
        (["--attack", "flip"], "attack: unknown 'flip'; use one of none, sign-flip"),
        (["--attack", "scaled", "--attack-fraction", "0.1"], "0.1 of 4 clients is no client"),
        (["--attack", "scaled", "--attack-fraction", "0"], "attack_fraction: 0.0 must be in (0, 1]"),
    ],
)
def test_an_attack_setting_the_run_cannot_use_is_refused_in_one_line(tmp_path, capsys, monkeypatch, args, message):
    from tests.support.commands import refused

    out = tmp_path / "out"
    lines = refused(capsys, monkeypatch, "--model", "mlp", "--num-clients", "4", "--clients-per-round", "2",
                    *args, "--out", str(out))  # fmt: skip
    assert len(lines) == 1 and message in lines[0], lines
    assert not out.exists()


def test_fedmedian_holds_where_fedavg_falls_under_sign_flip_at_30_percent(tmp_path):
    """3 of 10 clients reverse their update four times over: FedAvg's mean goes backwards (0.7 - 0.3 x 4 < 0),
    the coordinate-wise median keeps to the honest majority (measured: 2 % against 82 % after 3 rounds)."""
    common = ["--model", "mlp", "--num-clients", "10", "--clients-per-round", "10", "--rounds", "2", "--partition",
              "iid", "--batch-size", "200", "--attack", "sign-flip", "--attack-fraction", "0.3", "--attack-scale", "4"]  # fmt: skip
    accuracy = {}
    for server in ("fedavg", "flwr.serverapp.strategy:FedMedian"):
        out = tmp_path / server.rpartition(":")[2]
        assert run_sim.main([*common, "--server", server, "--out", str(out)]) == 0
        accuracy[server] = json.loads((out / "summary.json").read_text())["final_test_accuracy"]
    assert accuracy["fedavg"] < 0.3 < 0.7 < accuracy["flwr.serverapp.strategy:FedMedian"], accuracy


def test_every_arm_of_the_results_page_reaches_its_run(tmp_path, monkeypatch):
    """studies/attacks/attacks.toml's 24 arms (each aggregator at each attacker fraction, under each client
    side) are accepted as they are (the robust aggregators' --server-args included), up to where
    training would start: the page's commands run as written."""
    from tests.support.commands import no_engine_starts

    from fedpfn.study.cells import main_cells
    from fedpfn.study.spec import load

    class Started(Exception):
        pass

    def engine_run(*_args, **_kwargs):
        raise Started

    no_engine_starts(monkeypatch, engine_run)
    cells = [c for c in main_cells(load(Path(__file__).resolve().parents[2] / "studies" / "attacks" / "attacks.toml")) if c.seed == 0]
    for k, cell in enumerate(cells):
        with pytest.raises(Started):
            run_sim.main([*cell.flags, "--seed", "0", "--out", str(tmp_path / f"run{k}")])
    assert len(cells) == 24


def test_a_resumed_attack_continues_exactly_and_keeps_its_settings(tmp_path):
    """The attackers and a gaussian attacker's noise are the seed's: a run stopped after round 1 and
    resumed ends where the uninterrupted run ends; the attack is part of the fingerprint."""
    common = ["--model", "mlp", "--num-clients", "4", "--clients-per-round", "4", "--partition", "iid",
              "--batch-size", "500", "--attack", "gaussian", "--attack-fraction", "0.5", "--attack-scale", "0.01"]  # fmt: skip
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert run_sim.main([*common, "--rounds", "2", "--out", str(whole)]) == 0
    assert run_sim.main([*common, "--rounds", "1", "--out", str(part)]) == 0
    assert run_sim.main(["--resume", str(part), "--rounds", "2"]) == 0
    rows = [[json.loads(line) for line in (f / "metrics.jsonl").read_text().splitlines()] for f in (whole, part)]
    assert [r["test_loss"] for r in rows[0]] == [r["test_loss"] for r in rows[1]]
    marks = [[(r["partition_id"], r["malicious"]) for r in map(json.loads, (f / "clients.jsonl").read_text().splitlines())]
             for f in (whole, part)]  # fmt: skip
    assert marks[0] == marks[1] and sum(m for _, m in marks[0]) == 4
    config = json.loads((part / "config.json").read_text())
    assert (config["attacks.attack"], config["attacks.attack_scale"]) == ("gaussian", 0.01)


@pytest.mark.parametrize(("attack", "shown"), [("scaled", "scaled, S 10 by 4 of 8"), ("label-flip", "label-flip by 4 of 8")])
def test_the_run_header_shows_the_attack_as_it_shows_a_wrapper(attack, shown):
    """The header named a DP wrapper but not an attack (issue 56)."""
    from fedpfn.runtime.progress import header_lines

    lines = header_lines(attacked(attack), 1, "cpu")
    assert f"  attack     {shown} clients (drawn from the seed; clients.jsonl marks them)" in lines
    assert not any(line.startswith("  attack ") for line in header_lines(tiny_config(), 1, "cpu"))


OWN = """
from clients.attacks import ModelAttack


class Stalled(ModelAttack):
    \"\"\"Sends the model received back: no update at all.\"\"\"

    def sent(self, received, trained, name, per_client):
        return received


class NotAnAttack:
    pass
"""


@pytest.fixture
def own_attack(tmp_path, monkeypatch):
    """myattack.py in the current folder, where a user's own attack may lie; the registry as it was after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "myattack", raising=False)
    (tmp_path / "myattack.py").write_text(OWN)
    before = dict(ATTACKS)
    yield tmp_path
    ATTACKS.clear()
    ATTACKS.update(before)


def test_a_users_attack_runs_by_dotted_path_after_the_rule_and_the_anchors(own_attack, capsys, monkeypatch):
    """Its malicious clients send what it says, the honest as trained; a resume must name it again."""
    from tests.support.commands import refused

    cfg = attacked("myattack:Stalled", algorithm="fedpfn+fedprox")
    assert [cls.__name__ for cls in client_rules(cfg)] == ["FedProxClient", "FedPFNClient", "Stalled"]
    honest_cfg = tiny_config(num_clients=8, clients_per_round=8, batch_size=500, algorithm="fedpfn+fedprox")
    sent, messages = round_one(cfg)
    malicious = malicious_partitions(attack_of(cfg), cfg.seed, cfg.federation.num_clients)
    for message in messages:
        reply, trained = clientapp(cfg, message), clientapp(honest_cfg, message)
        for name, w in trained.items():
            want = sent[name] if message.metadata.dst_node_id in malicious else w
            assert np.array_equal(reply[name], want), (message.metadata.dst_node_id, name)
    args = ["--model", "mlp", "--num-clients", "4", "--clients-per-round", "4", "--rounds", "1", "--partition", "iid",
            "--batch-size", "500", "--attack", "myattack:Stalled", "--attack-fraction", "0.5", "--out", "run"]  # fmt: skip
    assert run_sim.main(args) == 0
    assert json.loads((own_attack / "run" / "config.json").read_text())["attacks.attack"] == "myattack:Stalled"
    monkeypatch.setattr("fedpfn.core.user_code._NAMED_BY_COMMAND", set())  # a later command has named nothing
    assert refused(capsys, monkeypatch, "--resume", "run", "--rounds", "2") == [
        "error: resume: the run's attack is the class 'myattack:Stalled', which only its config.json names; fedpfn "
        "imports code a command names, never a file: pass --attack myattack:Stalled to resume it"
    ]


@pytest.mark.parametrize(
    ("given", "line"),
    [
        (["--attack", "myattack:NotAnAttack"],
         "error: attack: 'myattack:NotAnAttack' is not an attack (a subclass of clients.attacks.Attack)"),
        (["--config", "preset.toml"],
         "error: attack: 'myattack:Stalled' is code that only a file names (a run folder's config.json or a preset); "
         "fedpfn imports a user's code only when the command names it: give it again on the command line "
         "(--attack or attack=)"),
    ],
)  # fmt: skip
def test_a_users_attack_is_refused_in_one_line_where_it_is_no_attack_or_only_a_file_names_it(
    own_attack, capsys, monkeypatch, given, line
):
    from tests.support.commands import refused

    (own_attack / "preset.toml").write_text('attack = "myattack:Stalled"\n')
    monkeypatch.setattr("fedpfn.core.user_code._NAMED_BY_COMMAND", set())
    lines = refused(capsys, monkeypatch, "--model", "mlp", "--num-clients", "4", "--clients-per-round", "2", *given,
                    "--out", "out")  # fmt: skip
    assert lines == [line]
    assert not (own_attack / "out").exists()
