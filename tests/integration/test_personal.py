"""Per-client (personal) entries and FedBN: never sent, kept by each client across rounds and
resumes, the same on either engine, never anchored, and the global model's copy untouched."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Message

from clients.state import ClientStateStore
from fedpfn.core.cache import initial_model
from fedpfn.core.config import ConfigError
from fedpfn.core.groups import Vmap
from fedpfn.core.personal import PERSONAL
from fedpfn.core.protocol import ARRAYS, NUM_EXAMPLES, to_numpy
from fedpfn.runtime.algorithms import build_strategy, personal_of
from fedpfn.runtime.simulation import resume_config, simulate
from tests.support.config import tiny_config
from tests.support.rounds import client_replies

HEAD = {"classifier.weight", "classifier.bias"}
# 12 clients of 5,000 images, 4 a round, 10 steps each; clients 5 and 10 train in rounds 1 and 2
SMALL = dict(num_clients=12, clients_per_round=4, batch_size=500, personal="classifier.*")


def rounds_in_process(cfg, count: int = 2):
    """`count` rounds through the real strategy and ClientApp path: (replies, sent, new model) a
    round, and the clients' context states."""
    model = initial_model(cfg)
    strategy, arrays, states, history = build_strategy(cfg, model), ArrayRecord(model.state_dict()), {}, []
    for server_round in range(1, count + 1):
        sent = to_numpy(arrays)
        replies = client_replies(cfg, strategy, arrays, server_round, states)
        received = [{k: v.copy() for k, v in to_numpy(r.content[ARRAYS]).items()} for r in replies]
        weights = [float(r.content["metrics"][NUM_EXAMPLES]) for r in replies]
        arrays, _ = strategy.aggregate_train(server_round, replies)
        history.append((received, weights, sent, to_numpy(arrays)))
    return history, states


def test_personal_entries_never_leave_the_client_and_the_global_copy_stays(monkeypatch):
    cfg = tiny_config(algorithm="fedpnu", **SMALL)
    history, states = rounds_in_process(cfg)
    for received, _, sent, new in history:
        for arrays in received:
            assert all(arrays[name].size == 0 for name in HEAD), "a reply carries a personal entry"
            assert all(arrays[name].size > 0 for name in arrays if name not in HEAD)
        assert all(np.array_equal(new[name], sent[name]) for name in HEAD)
        assert not np.array_equal(new["features.1.weight"], sent["features.1.weight"]), "the body did not train"
    kept = [to_numpy(state[PERSONAL]) for state in states.values()]
    start = to_numpy(ArrayRecord(initial_model(cfg).state_dict()))
    assert set(kept[0]) == HEAD and not np.array_equal(kept[0]["classifier.weight"], start["classifier.weight"])
    assert not np.array_equal(kept[0]["classifier.weight"], kept[1]["classifier.weight"]), "heads are not each client's"


def test_fedbn_keeps_batchnorm_local_and_averages_everything_else():
    cfg = tiny_config(algorithm="fedbn", model="resnet20", num_clients=1000, batch_size=30)
    bn = personal_of(cfg, initial_model(cfg))
    assert "bn1.running_mean" in bn and "layers.8.bn2.weight" in bn and "conv1.weight" not in bn
    history, states = rounds_in_process(cfg)
    for received, weights, sent, new in history:
        for name in sent:
            if name in bn:
                assert all(a[name].size == 0 for a in received) and np.array_equal(new[name], sent[name]), name
            else:  # the example-weighted mean of what the clients sent (Flower's float32 sums)
                mean = sum(w * a[name].astype(np.float64) for w, a in zip(weights, received)) / sum(weights)
                np.testing.assert_allclose(new[name], mean, rtol=0, atol=1e-6, err_msg=name)
                assert not np.array_equal(new[name], sent[name]), f"{name} was not averaged"
    kept = to_numpy(next(iter(states.values()))[PERSONAL])
    assert set(kept) == bn and not np.array_equal(kept["bn1.running_mean"], history[0][2]["bn1.running_mean"])


def test_a_pattern_that_matches_nothing_is_refused_in_one_line():
    with pytest.raises(ConfigError) as refused:
        tiny_config(personal="classifier.*, head.*")
    assert str(refused.value).splitlines() == [
        "personal: 'head.*' matches no entry of mlp (its entries start with classifier, features; e.g. 'classifier.bias')"
    ]
    with pytest.raises(ConfigError, match="^algorithm: fedbn keeps BatchNorm layers local, but mlp has none$"):
        tiny_config(algorithm="fedbn")
    with pytest.raises(ConfigError, match="^personal: fedprox reads the global model as each client's start"):
        tiny_config(algorithm="fedprox", personal="classifier.*")
    assert tiny_config(personal="classifier.*").task.personal == "classifier.*"


@pytest.mark.parametrize("granularity", ["weight", "neuron"])
def test_anchors_never_cover_personal_entries(granularity):
    cfg = tiny_config(algorithm="fedpfn", personal="classifier.weight", anchor_granularity=granularity)
    model = initial_model(cfg)
    mask = build_strategy(cfg, model).parts[0].mask_for(1)
    plain = build_strategy(tiny_config(algorithm="fedpfn", anchor_granularity=granularity), model).parts[0].mask_for(1)
    assert "classifier.weight" not in mask and "classifier.weight" in plain
    assert all(np.array_equal(mask[name], plain[name]) for name in mask), "the other entries' masks moved"


def personal_states(out, pids) -> dict[int, dict[str, np.ndarray]]:
    return {pid: to_numpy(ClientStateStore(out, pid).load(PERSONAL, 10**6)) for pid in pids}


def final_model(out) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in torch.load(out / "model_round_2.pt", weights_only=True).items()}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("personal") / "whole"
    cfg = tiny_config(engine="batched", engine_mode="threads", out=str(out), **SMALL)
    simulate(cfg, show_progress=False)
    return out


@pytest.mark.slow  # Ray's start: about 40 s on the loaded 2 cores
def test_personal_entries_survive_a_resume_and_a_move_to_ray_bit_for_bit(uninterrupted, tmp_path):
    """Stopped after round 1 on the batched engine, resumed on Ray (fresh actors: each head read
    back from client_state/): the uninterrupted batched run's model and heads, bit for bit."""
    out = tmp_path / "stopped"
    simulate(tiny_config(engine="batched", engine_mode="threads", rounds=1, out=str(out), **SMALL), show_progress=False)
    simulate(resume_config(str(out), {"rounds": 2, "engine": "ray"}), resume=True, show_progress=False)
    check_same_run(out, uninterrupted)


def check_same_run(out, reference) -> None:
    mine, theirs = final_model(out), final_model(reference)
    assert set(mine) == set(theirs) and all(np.array_equal(mine[k], theirs[k]) for k in theirs)
    pids = sorted(int(p.name) for p in (reference / "client_state").iterdir())
    assert {5, 10} <= set(pids) == {int(p.name) for p in (out / "client_state").iterdir()}
    kept, expected = personal_states(out, pids), personal_states(reference, pids)
    for pid in pids:
        assert set(kept[pid]) == HEAD and all(np.array_equal(kept[pid][n], expected[pid][n]) for n in HEAD), pid


@pytest.mark.parametrize("partition", ["iid", "tasks"])
def test_the_batched_cohort_keeps_the_heads_the_clientapp_keeps(partition, tmp_path):
    """Two rounds of a vmapped cohort against the ClientApp, client by client (float64); with
    `tasks`, ColD fusion's rounds: each contributor its own task and head."""
    from fedpfn.runtime.engines.prepared import ClientJob
    from fedpfn.runtime.engines.program import CohortProgram, local_round
    from tests.support.rounds import NodeGrid
    from fedpfn.runtime.algorithms import client_rules
    from fedpfn.runtime.server import train_config, with_accepted_round
    from strategies import sample_clients

    cfg, other = (tiny_config(out=str(tmp_path / name), partition=partition, **SMALL) for name in "ab")
    model = initial_model(cfg).double()
    strategy, arrays = build_strategy(cfg, model), ArrayRecord(model.state_dict())
    seq, bat, rules, cpu = {}, {}, client_rules(cfg), torch.device("cpu")
    for server_round in (1, 2):
        chosen = sample_clients(cfg.seed, server_round, cfg.federation.num_clients, cfg.federation.clients_per_round)
        messages = list(strategy.configure_train(server_round, arrays, train_config(cfg, server_round), NodeGrid(chosen)))
        messages = [with_accepted_round(m, server_round - 1) for m in messages]
        replies = [local_round(rules, cfg, p, seq.setdefault(p, _state()), cpu, m.content) for p, m in zip(chosen, messages)]
        jobs = [ClientJob(p, bat.setdefault(p, _state()), server_round - 1) for p in chosen]
        kept = {p: to_numpy(bat[p][PERSONAL]) for p in chosen if PERSONAL in bat[p].array_records}
        cohort = CohortProgram(rules, other, messages[0].content, cpu, jobs)
        for k, pid in enumerate(chosen):  # its own head from its last round, else the global model's
            head = kept[pid] if pid in kept else to_numpy(arrays)
            assert all(np.array_equal(cohort.starts[k][0][n].numpy(), head[n]) for n in HEAD)
        assert len(kept) == (0 if server_round == 1 else 2)
        result = cohort.train(Vmap)
        for k, pid in enumerate(chosen):
            mine, theirs = to_numpy(result.reply_content(k)[ARRAYS]), to_numpy(replies[k][ARRAYS])
            assert all(np.allclose(mine[n], theirs[n], rtol=0, atol=1e-12) and mine[n].shape == theirs[n].shape for n in theirs)
            kept_b, kept_s = to_numpy(bat[pid][PERSONAL]), to_numpy(seq[pid][PERSONAL])
            assert set(kept_s) == HEAD and all(np.allclose(kept_b[n], kept_s[n], rtol=0, atol=1e-12) for n in HEAD)
        arrays, _ = strategy.aggregate_train(server_round, [Message(r, reply_to=m) for r, m in zip(replies, messages)])


def _state():
    from flwr.app import RecordDict

    return RecordDict()


def test_tasks_give_each_client_its_own_label_space(tmp_path):
    from fedpfn.core.cache import client_data
    from partitions import TASK_NAMES, partition_labels, task_labels, task_of
    from partitions.tasks import FMNIST_TASKS, label_map

    labels = np.random.default_rng(0).integers(0, 10, 4000)
    parts = partition_labels(labels, 8, "tasks", seed=1)
    relabelled = task_labels(labels, parts)
    assert len(np.unique(np.concatenate(parts))) == sum(len(p) for p in parts), "an image in two clients"
    for k, part in enumerate(parts):
        groups = FMNIST_TASKS[task_of(k)]
        assert set(labels[part]) == {c for group in groups for c in group}
        assert set(relabelled[part]) == set(range(len(groups)))
        assert all(label_map(task_of(k))[labels[i]] == relabelled[i] for i in part[:50])
    assert [task_of(k) for k in range(5)] == [*TASK_NAMES, TASK_NAMES[0]]
    cfg = tiny_config(partition="tasks", num_clients=8)
    data = client_data(cfg, 1, torch.device("cpu"))  # upper vs. lower body: 2 classes
    assert set(data.y[data.train].tolist()) == {0, 1} and len(data.train) < 60_000 // 8
    from fedpfn.runtime.nodedata import read_partition, write_partition

    write_partition(cfg, 1, tmp_path / "node")  # a deployed node's own copy: the task's labels too
    node = read_partition(cfg, 1, tmp_path / "node")
    assert torch.equal(node.y[node.train], data.y[data.train])
    with pytest.raises(ConfigError, match="^partition: tasks are derived from Fashion-MNIST's classes; use --dataset"):
        tiny_config(partition="tasks", dataset="mnist")

