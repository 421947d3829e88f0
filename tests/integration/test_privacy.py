"""Flower's differential-privacy wrappers around the composed strategy, its client mods around the
ClientApp, and the privacy budget from Opacus's accountant (issue 43, items 1-3).

What a user relies on: every update the server aggregates is within the clipping bound (computed
from the replies themselves), the noise has the scale the wrapper declares, the rule's own records
(SCAFFOLD's) travel untouched, a run's noise is its seed's (a resume continues it exactly), and
the (ε, δ) recorded is Opacus's for the run's noise and sampling rate.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Context, RecordDict

import run_sim
from fedpfn.core.cache import initial_model
from fedpfn.core.protocol import to_numpy
from fedpfn.runtime.algorithms import build_strategy, mean_based
from fedpfn.runtime.server import train_config, with_accepted_round
from strategies import sample_clients
from strategies.privacy import PrivacyBudget
from strategies.wrapping import ComposedView
from tests.support.config import tiny_config
from tests.support.rounds import client_replies, NodeGrid

FLOWER = "flwr.serverapp.strategy:DifferentialPrivacy"
NOISE, CLIP = 0.3, 0.2  # a bound the MLP's first-round updates exceed (their norms are about 1)


def wrapped_config(algorithm: str, wrapper: str = "ServerSideFixedClipping", **overrides):
    args = json.dumps({"noise_multiplier": NOISE, "clipping_norm": CLIP})
    return tiny_config(algorithm=algorithm, server_wrap=FLOWER + wrapper, server_wrap_args=args, **overrides)


def update_norm(arrays: dict, sent: dict, names: list[str]) -> float:
    return math.sqrt(sum(float(np.sum((arrays[n].astype(np.float64) - sent[n]) ** 2)) for n in names))


@pytest.mark.parametrize("algorithm", ["fedavg", "fedpfn", "scaffold"])
def test_server_side_clipping_bounds_every_update_and_the_noise_has_its_declared_scale(algorithm, monkeypatch):
    cfg = wrapped_config(algorithm)
    assert not mean_based(cfg)  # the batched engine hands the server every reply, not the totals
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    names = strategy.composed.param_names
    arrays = ArrayRecord(model.state_dict())
    sent = to_numpy(arrays)
    seen: dict = {}
    aggregate = ComposedView.aggregate_train

    def spy(view, server_round, replies):  # what the wrapper hands on: the clipped replies
        replies = list(replies)
        seen["clipped"] = [to_numpy(r.content["arrays"]) for r in replies]
        out = aggregate(view, server_round, replies)
        seen["before_noise"] = to_numpy(out[0])
        return out

    monkeypatch.setattr(ComposedView, "aggregate_train", spy)
    replies = client_replies(cfg, strategy, arrays, 1)
    raw = [update_norm(to_numpy(r.content["arrays"]), sent, names) for r in replies]
    assert max(raw) > CLIP  # the bound binds, so the test can fail
    new, _ = strategy.aggregate_train(1, replies)
    clipped = [update_norm(c, sent, names) for c in seen["clipped"]]
    assert len(clipped) == cfg.federation.clients_per_round and max(clipped) <= CLIP * (1 + 1e-5), clipped
    assert update_norm(seen["before_noise"], sent, names) <= CLIP * (1 + 1e-5)  # their aggregate too
    new = to_numpy(new)
    noise = np.concatenate([(new[n].astype(np.float64) - seen["before_noise"][n]).ravel() for n in names])
    declared = NOISE * CLIP / cfg.federation.clients_per_round  # Flower's compute_stdv: z·C/K on the mean
    assert noise.std() == pytest.approx(declared, rel=0.02)
    assert abs(noise.mean()) < 4 * declared / math.sqrt(noise.size)
    assert set(new) == set(sent) and all(new[k].dtype == sent[k].dtype for k in sent)


def clientapp_reply(cfg, partition: int, message):
    """The ClientApp's own train function (fedpfn.runtime.client_app), mod and all."""
    from fedpfn.runtime.client_app import train

    context = Context(run_id=1, node_id=partition, node_config={"partition-id": partition}, state=RecordDict(),
                      run_config={})  # fmt: skip
    return train(with_accepted_round(message, 0), context)


def first_round(cfg):
    """(the model sent, the run's strategy, its round-1 train messages)."""
    model = initial_model(cfg)
    strategy = build_strategy(cfg, model)
    arrays = ArrayRecord(model.state_dict())
    chosen = sample_clients(cfg.seed, 1, cfg.federation.num_clients, cfg.federation.clients_per_round)
    return to_numpy(arrays), strategy, list(strategy.configure_train(1, arrays, train_config(cfg, 1), NodeGrid(chosen)))


@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold"])
def test_fixedclipping_mod_clips_what_the_clientapp_sends_and_keeps_the_rules_records(algorithm):
    mod = {"client_mod": "flwr.clientapp.mod:fixedclipping_mod"}
    with_mod = wrapped_config(algorithm, "ClientSideFixedClipping", engine="ray", **mod)
    plain = wrapped_config(algorithm, "ClientSideFixedClipping", engine="ray")
    sent, _, messages = first_round(with_mod)
    _, _, plain_messages = first_round(plain)
    names = [n for n, _ in initial_model(with_mod).named_parameters()]
    for message, plain_message in zip(messages, plain_messages, strict=True):
        partition = message.metadata.dst_node_id
        assert message.content["config"]["clipping_norm"] == CLIP  # the wrapper's word to the mod
        clipped = clientapp_reply(with_mod, partition, message)
        unclipped = clientapp_reply(plain, partition, plain_message)
        assert not clipped.has_error(), clipped.error
        assert update_norm(to_numpy(unclipped.content["arrays"]), sent, names) > CLIP
        assert update_norm(to_numpy(clipped.content["arrays"]), sent, names) <= CLIP * (1 + 1e-5)
        assert set(clipped.content) == set(unclipped.content)
        for key in set(clipped.content.array_records) - {"arrays"}:  # SCAFFOLD's Δc: as the rule wrote it
            ours, theirs = to_numpy(clipped.content[key]), to_numpy(unclipped.content[key])
            assert all(np.array_equal(ours[n], theirs[n]) for n in theirs)


def test_local_dp_mod_adds_the_noise_its_epsilon_and_delta_declare():
    args = {"clipping_norm": 0.5, "sensitivity": 0.5, "epsilon": 10.0, "delta": 1e-5}
    cfg = tiny_config(engine="ray", client_mod="flwr.clientapp.mod:LocalDpMod", client_mod_args=json.dumps(args))
    sent, _, messages = first_round(cfg)
    reply = clientapp_reply(cfg, messages[0].metadata.dst_node_id, messages[0])
    got = to_numpy(reply.content["arrays"])
    change = np.concatenate([(got[n].astype(np.float64) - sent[n]).ravel() for n in sent])
    declared = args["sensitivity"] * math.sqrt(2 * math.log(1.25 / args["delta"])) / args["epsilon"]
    assert change.std() == pytest.approx(declared, rel=0.02)  # the clipped update (norm 0.5) is far below it
    again = clientapp_reply(cfg, messages[0].metadata.dst_node_id, first_round(cfg)[2][0])
    assert all(np.array_equal(got[n], to_numpy(again.content["arrays"])[n]) for n in got)  # seeded


@pytest.mark.parametrize(("wrapper", "mod"), [("ServerSideAdaptiveClipping", None),
                                              ("ClientSideAdaptiveClipping", "adaptiveclipping_mod")])
def test_the_adaptive_wrappers_move_their_clipping_norm_and_a_checkpoint_keeps_it(wrapper, mod):
    args = json.dumps({"noise_multiplier": 0.05, "initial_clipping_norm": CLIP})  # Flower: count noise K/20 >= z/2
    mods = {"client_mod": f"flwr.clientapp.mod:{mod}"} if mod else {}
    cfg = tiny_config(engine="ray", server_wrap=FLOWER + wrapper, server_wrap_args=args, **mods)
    _, strategy, messages = first_round(cfg)
    replies = [clientapp_reply(cfg, m.metadata.dst_node_id, m) for m in messages]
    assert not any(r.has_error() for r in replies)
    new, _ = strategy.aggregate_train(1, replies)
    assert new is not None and all(np.isfinite(a).all() for a in to_numpy(new).values())
    figures = strategy.round_summary()
    # every update was above the bound; Flower 1.42 counts the clipped ones where Andrew et al. count
    # the unclipped, so its bound shrinks here (docs/guide/privacy.md): the bound moved, as Flower moves it
    assert figures["dp_clipping_norm"] == pytest.approx(CLIP * math.exp(-0.2 * (1 - 0.5)), rel=0.05)
    assert figures["dp_epsilon"] > 0
    resumed = build_strategy(cfg, initial_model(cfg))
    resumed.load_state(strategy.state())
    assert resumed.round_summary()["dp_clipping_norm"] == figures["dp_clipping_norm"]
    assert resumed.budget.releases == 1


def test_the_budget_is_opacus_called_directly_and_moves_with_the_noise():
    from opacus.accountants import RDPAccountant

    budget = PrivacyBudget(noise_multiplier=1.0, sample_rate=0.5, delta=1e-5)
    assert budget.epsilon() == 0.0  # no round released: nothing spent
    for _ in range(3):
        budget.release()
    direct = RDPAccountant()
    for _ in range(3):
        direct.step(noise_multiplier=1.0, sample_rate=0.5)
    assert budget.epsilon() == pytest.approx(direct.get_epsilon(1e-5), rel=1e-12)
    noisier = PrivacyBudget(noise_multiplier=2.0, sample_rate=0.5, delta=1e-5)
    noisier.releases = 3
    assert 0 < noisier.epsilon() < budget.epsilon()
    more = PrivacyBudget(noise_multiplier=1.0, sample_rate=0.5, delta=1e-5)
    more.releases = 4
    assert more.epsilon() > budget.epsilon()


def test_a_wrapped_run_records_its_budget_and_a_resume_continues_it_exactly(tmp_path, capsys):
    wrap = ["--server-wrap", FLOWER + "ServerSideFixedClipping", "--server-wrap-args",
            json.dumps({"noise_multiplier": 0.05, "clipping_norm": 1.0})]  # fmt: skip
    common = ["--dataset", "fmnist", "--model", "mlp", "--num-clients", "4", "--clients-per-round", "2",
              "--partition", "iid", "--local-epochs", "1", *wrap]  # fmt: skip
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert run_sim.main([*common, "--rounds", "2", "--out", str(whole)]) == 0
    shown = capsys.readouterr().out
    assert "it reads every reply" in shown  # the header says the totals shortcut is off
    assert "privacy    ε " in shown and "Opacus RDP accountant" in shown  # and the closing lines the budget
    assert run_sim.main([*common, "--rounds", "1", "--out", str(part)]) == 0
    assert run_sim.main(["--resume", str(part), "--rounds", "2"]) == 2  # the wrapper must be named again
    assert "pass --server-wrap" in capsys.readouterr().err
    assert run_sim.main(["--resume", str(part), "--rounds", "2", *wrap[:2]]) == 0
    rows = [[json.loads(line) for line in (f / "metrics.jsonl").read_text().splitlines()] for f in (whole, part)]
    keys = ("test_loss", "test_accuracy", "train_loss", "dp_epsilon")
    assert [[r[k] for k in keys] for r in rows[0]] == [[r[k] for k in keys] for r in rows[1]]
    expected = PrivacyBudget(0.05, 2 / 4, 1e-5)
    expected.releases = 2
    assert rows[0][-1]["dp_epsilon"] == pytest.approx(expected.epsilon()) and rows[0][0]["dp_epsilon"] > 0
    summary = json.loads((whole / "summary.json").read_text())
    assert summary["dp_epsilon"] == rows[0][-1]["dp_epsilon"] and "Opacus" in summary["dp_accountant"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--client-mod", "flwr.clientapp.mod:fixedclipping_mod"], "--engine ray"),
        (["--server-wrap-args", '{"noise_multiplier": 1}'], "only --server-wrap uses it"),
        (["--server-wrap", FLOWER + "ServerSideFixedClipping", "--server-wrap-args", '{"noise": 1}'],
         "takes no argument noise"),
        (["--server-wrap", FLOWER + "ServerSideFixedClipping", "--server-wrap-args",
          '{"noise_multiplier": 1, "clipping_norm": 1, "num_sampled_clients": 3}'], "is not clients_per_round"),
        (["--server-wrap", "flwr.serverapp.strategy:FedAvg"], "takes no 'strategy' argument"),
        (["--engine", "ray", "--algorithm", "fedpnu", "--client-mod", "flwr.clientapp.mod:fixedclipping_mod"],
         "fedpnu uploads only the entries that trained"),
        (["--client-mod-args", '{"a": 1}'], "only --client-mod uses it"),
        (["--engine", "ray", "--client-mod", "flwr.clientapp.mod:fixedclipping_mod", "--client-mod-args",
          '{"a": 1}'], "is a function"),
        (["--engine", "ray", "--client-mod", "flwr.clientapp.mod:LocalDpMod"], "LocalDpMod() failed"),
        (["--engine", "ray", "--client-mod", "flwr.app:Context"], "Context() failed"),
    ],
)  # fmt: skip
def test_a_wrapper_or_mod_the_run_cannot_use_is_refused_in_one_line(tmp_path, capsys, monkeypatch, args, message):
    from tests.support.commands import refused

    out = tmp_path / "out"
    lines = refused(capsys, monkeypatch, "--model", "mlp", "--num-clients", "4", "--clients-per-round", "2",
                    *args, "--out", str(out))  # fmt: skip
    assert len(lines) == 1 and message in lines[0], lines
    assert not out.exists()


@pytest.mark.slow
def test_client_side_clipping_on_ray_with_scaffold_bounds_every_reply(tmp_path, monkeypatch):
    """Ray runs the ClientApp (and its mod) in its workers; the server, here, sees the replies."""
    from strategies.wrapping import WrappedStrategy

    norms: list[float] = []
    aggregate = WrappedStrategy.aggregate_train

    def spy(self, server_round, replies):
        replies = list(replies)
        sent = to_numpy(self.view.whole)
        norms.extend(update_norm(to_numpy(r.content["arrays"]), sent, self.composed.param_names) for r in replies)
        return aggregate(self, server_round, replies)

    monkeypatch.setattr(WrappedStrategy, "aggregate_train", spy)
    args = json.dumps({"noise_multiplier": NOISE, "clipping_norm": CLIP})
    code = run_sim.main(["--algorithm", "scaffold", "--model", "mlp", "--num-clients", "4", "--clients-per-round", "2",
                         "--partition", "iid", "--rounds", "2", "--engine", "ray", "--out", str(tmp_path / "r"),
                         "--server-wrap", FLOWER + "ClientSideFixedClipping", "--server-wrap-args", args,
                         "--client-mod", "flwr.clientapp.mod:fixedclipping_mod"])  # fmt: skip
    assert code == 0
    assert len(norms) == 4 and max(norms) <= CLIP * (1 + 1e-5), norms
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["dp_epsilon"] > 0 for r in rows] == [True, True] and rows[1]["dp_epsilon"] > rows[0]["dp_epsilon"]
    assert torch.isfinite(torch.tensor([r["test_loss"] for r in rows])).all()


@pytest.mark.slow
def test_flwr_run_takes_the_wrapper_and_the_client_mod(tmp_path):
    """Under `flwr run` the ClientApp runs the mod (a mod that lacked the wrapper's clipping norm, or
    met SCAFFOLD's extra records, would fail every reply: num_failures 0 says it did not)."""
    import subprocess

    from tests.support.flower_link import BIN, simulation_superlink

    preset = tmp_path / "dp.toml"
    preset.write_text(
        'algorithm = "scaffold"\ndataset = "fmnist"\nmodel = "mlp"\nnum-clients = 4\nclients-per-round = 2\n'
        'rounds = 2\npartition = "iid"\nout = "dp-flwr"\n'
        f'server-wrap = "{FLOWER}ClientSideFixedClipping"\n'
        f"server-wrap-args = '{json.dumps({'noise_multiplier': NOISE, 'clipping_norm': CLIP})}'\n"
        'client-mod = "flwr.clientapp.mod:fixedclipping_mod"\n'
    )
    with simulation_superlink(tmp_path / "flwr") as link:
        done = subprocess.run(
            [str(BIN / "flwr"), "run", ".", "--run-config", str(preset), "--federation-config",
             "num-supernodes=4 client-resources-num-cpus=1", "--stream"],
            cwd=Path(__file__).resolve().parents[2], env=link.env, capture_output=True, text=True, timeout=420,
        )  # fmt: skip
        metrics = link.folder / "dp-flwr" / "metrics.jsonl"
        assert metrics.exists(), done.stdout[-3000:] + done.stderr[-3000:]
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["num_failures"] for r in rows] == [0, 0]
    expected = PrivacyBudget(NOISE, 2 / 4, 1e-5)
    expected.releases = 2
    assert rows[-1]["dp_epsilon"] == pytest.approx(expected.epsilon())


USER_CODE = '''
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import Strategy


class Shrink(Strategy):
    """Moves the model only `factor` of the way to what the strategy it wraps aggregated."""

    def __init__(self, strategy, factor=1.0):
        self.strategy, self.factor, self.rounds = strategy, factor, 0

    def configure_train(self, server_round, arrays, config, grid):
        self.sent = {k: v.numpy() for k, v in arrays.items()}
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        self.rounds += 1
        new, metrics = self.strategy.aggregate_train(server_round, replies)
        step = {k: self.sent[k] + self.factor * (new[k].numpy() - self.sent[k]) for k in new.keys()}
        return ArrayRecord({k: Array(v) for k, v in step.items()}), metrics

    def configure_evaluate(self, server_round, arrays, config, grid):
        return []

    def aggregate_evaluate(self, server_round, replies):
        return None

    def summary(self):
        pass


def tag_mod(msg, ctxt, call_next):
    """Marks every reply, and checks it was shown what Flower's mods expect."""
    assert len(msg.content.array_records) == 1 and len(msg.content.config_records) == 1
    reply = call_next(msg, ctxt)
    assert len(reply.content.array_records) == 1 and len(msg.content.array_records) == 1
    reply.content["metrics"]["tagged"] = 1
    return reply
'''


def test_a_users_wrapper_and_mod_by_dotted_path(tmp_path, monkeypatch):
    (tmp_path / "h43_user_plugins.py").write_text(USER_CODE)
    monkeypatch.chdir(tmp_path)
    wrapped = tiny_config(algorithm="scaffold", engine="ray", server_wrap="h43_user_plugins:Shrink",
                          server_wrap_args='{"factor": 0.5}', client_mod="h43_user_plugins:tag_mod")  # fmt: skip
    plain = tiny_config(algorithm="scaffold", engine="ray")
    sent, strategy, messages = first_round(wrapped)
    _, reference, plain_messages = first_round(plain)
    replies = [clientapp_reply(wrapped, m.metadata.dst_node_id, m) for m in messages]
    plain_replies = [clientapp_reply(plain, m.metadata.dst_node_id, m) for m in plain_messages]
    assert all(r.content["metrics"]["tagged"] == 1 for r in replies)
    assert all(set(r.content) == set(p.content) for r, p in zip(replies, plain_replies, strict=True))
    new, full = to_numpy(strategy.aggregate_train(1, replies)[0]), to_numpy(reference.aggregate_train(1, plain_replies)[0])
    assert all(np.allclose(new[k], sent[k] + 0.5 * (full[k] - sent[k]), atol=1e-6) for k in sent)
    assert "dp_epsilon" not in strategy.round_summary()  # no noise_multiplier: no budget
    resumed = build_strategy(wrapped, initial_model(wrapped))
    resumed.load_state(strategy.state())
    assert resumed.wrapper.rounds == 1  # a user's wrapper keeps its plain attributes in checkpoints
