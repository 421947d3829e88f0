"""The batched engine's processes mode: the numbers of `loop`, bit for bit, per client rule and
model family, state included; clients dealt to the workers by size; the workers gone with the run.

Each rule runs two rounds (its state carried from the first into the second) of 5 clients of
unequal sizes, once in worker processes and once one after another in this process, each with
a run folder of its own; every reply and every client's `context.state` must be equal to the
last bit. The instrument moves: a worker given another learning rate gives other bits. From the
second round the workers write into shared slots the driver reads in place, and every round's
model reaches them through one shared copy (slots.py): four rounds, one of them larger than the
slots, give the loop's numbers too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from flwr.app import ArrayRecord, Message, RecordDict

from fedpfn.core import protocol
from fedpfn.core.cache import initial_model
from fedpfn.core.config import RunConfig
from fedpfn.core.groups import Loop
from fedpfn.runtime.algorithms import CLIENT_RULES, build_strategy, client_rules
from fedpfn.runtime.engines.prepared import ClientJob
from fedpfn.runtime.engines.processes import ProcessRunner, deal
from fedpfn.runtime.engines.program import CohortProgram
from fedpfn.runtime.engines.result import CohortResult
from fedpfn.runtime.server import train_config, with_accepted_round
from strategies import sample_clients
from tests.support.config import tiny_config
from tests.support.procfs import alive, children
from tests.support.rounds import NodeGrid

OWN_HPARAMS = {"fedprox": {"prox_mu": 0.1}, "feddyn": {"feddyn_alpha": 0.1}}
ANCHORS = ("", "fedpfn", "fedpnu")
# every rule, the anchors cycling; FedBN needs BatchNorm (ResNet-20), and one rule runs on the CNN
CASES = [
    (rule, ANCHORS[i % len(ANCHORS)], "resnet20" if CLIENT_RULES[rule].personal_layers else ("cnn" if i == 1 else "mlp"))
    for i, rule in enumerate(CLIENT_RULES)
]


def case_config(rule: str, anchor: str, model: str, out: Path):
    algorithm = f"{anchor}+{rule}" if anchor and rule != "fedavg" else (anchor or rule)
    return tiny_config(
        algorithm=algorithm, model=model, num_clients=2000, clients_per_round=5, batch_size=16, partition="dirichlet",
        alpha=1.0, min_partition_size=5, seed=3, momentum=0.9, out=str(out), **OWN_HPARAMS.get(rule, {}),
    )  # fmt: skip


def same_bits(a: RecordDict, b: RecordDict, where: str) -> None:
    assert set(a.array_records) == set(b.array_records), where
    for key, record in b.array_records.items():
        for name in record:
            x, y = a.array_records[key][name].numpy(), record[name].numpy()
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f"{where} {key}.{name}"
    for key, record in b.metric_records.items():
        mine = {k: v for k, v in a.metric_records[key].items() if k != protocol.TRAIN_SECONDS}
        assert mine == {k: v for k, v in record.items() if k != protocol.TRAIN_SECONDS}, f"{where} {key}"


def two_rounds(rule: str, anchor: str, model: str, tmp: Path, worker_lr: float | None = None) -> None:
    """Both ways, two rounds of the rule's sampled clients; AssertionError naming the first entry
    that differs."""
    cfgs = {way: case_config(rule, anchor, model, tmp / way) for way in ("processes", "loop")}
    cfg = cfgs["loop"]
    cohorts = [sample_clients(cfg.seed, r, cfg.federation.num_clients, cfg.federation.clients_per_round) for r in (1, 2)]
    both_ways(cfgs, cohorts, f"{rule}/{anchor or '-'}/{model}", worker_lr)


def both_ways(
    cfgs: dict[str, RunConfig], cohorts: list[list[int]], name: str, worker_lr: float | None = None,
    after: Callable[[ProcessRunner, CohortResult], None] | None = None,
) -> None:  # fmt: skip
    """Each cohort a round, trained by worker processes (`cfgs["processes"]`) and one after another
    in this process (`cfgs["loop"]`), state carried from round to round; every reply and every
    client's `context.state` compared bit for bit; `after(runner, the workers' result)` each round."""
    cfg = cfgs["loop"]
    net = initial_model(cfg)
    strategy = build_strategy(cfg, net)
    arrays = ArrayRecord(net.state_dict())
    rules, cpu = client_rules(cfg), torch.device("cpu")
    states: dict[str, dict[int, RecordDict]] = {"processes": {}, "loop": {}}
    runner = ProcessRunner(cfgs["processes"], workers=2)
    workers = list(runner.workers)
    try:
        for server_round, chosen in enumerate(cohorts, start=1):
            config = train_config(cfg, server_round)
            messages = [with_accepted_round(m, server_round - 1) for m in strategy.configure_train(
                server_round, arrays, config, NodeGrid(chosen))]  # fmt: skip
            content = messages[0].content
            if worker_lr is not None:  # the instrument's check: the workers train at another step
                content = RecordDict({**content})
                content[protocol.CONFIG] = type(content[protocol.CONFIG])({**content[protocol.CONFIG], protocol.LR: worker_lr})
            jobs = {way: [ClientJob(p, states[way].setdefault(p, RecordDict()), server_round - 1) for p in chosen]
                    for way in states}  # fmt: skip
            by_workers = runner(content, jobs["processes"])
            if after is not None:
                after(runner, by_workers)
            by_loop = CohortProgram(rules, cfg, messages[0].content, cpu, jobs["loop"]).train(Loop)
            for k, pid in enumerate(chosen):
                where = f"{name} round {server_round} client {pid}"
                same_bits(by_workers.reply_content(k), by_loop.reply_content(k), where)
                same_bits(states["processes"][pid], states["loop"][pid], f"{where} state")
            replies = [Message(by_loop.reply_content(k), reply_to=m) for k, m in enumerate(messages)]
            arrays, _ = strategy.aggregate_train(server_round, replies)
    finally:
        runner.close()
    assert not any(worker.is_alive() for worker in workers)


@pytest.mark.parametrize("rule,anchor,model", CASES, ids=["-".join(filter(None, c)) for c in CASES])
def test_worker_processes_give_the_numbers_of_the_loop_bit_for_bit(rule, anchor, model, tmp_path):
    two_rounds(rule, anchor, model, tmp_path)


def test_the_comparison_sees_a_worker_that_computes_otherwise(tmp_path):
    with pytest.raises(AssertionError, match="round 1 client"):
        two_rounds("fedavg", "fedpfn", "mlp", tmp_path, worker_lr=0.0501)


def test_rounds_read_from_the_slots_give_the_loops_numbers_and_a_larger_round_remakes_them(tmp_path):
    """From round 2 the workers write into shared slots and the driver's tensors are views of them;
    a round of more clients than the slots hold comes back as tensors and the slots are made
    again. SCAFFOLD carries state and a reply record (its delta) among the tensors."""
    cfgs = {
        way: tiny_config(algorithm="fedpfn+scaffold", num_clients=2000, clients_per_round=5, batch_size=16, momentum=0.9,
                         partition="iid", seed=4, out=str(tmp_path / way))  # clients of 30 images
        for way in ("processes", "loop")
    }  # fmt: skip
    seen = []

    def in_slots(runner: ProcessRunner, result: CohortResult) -> None:
        rows = runner.slots.rows["params"]
        viewed = all(result.params[n].data_ptr() == rows[n].data_ptr() for n in rows)
        seen.append((viewed, runner.slots.capacity, runner.slots.generation, runner.model.generation, runner.model_held))

    cohorts = [[3, 8, 1, 5, 12], [2, 3, 9, 14, 7], [1, 2, 3, 4, 5, 6, 10, 11], [0, 8, 9, 13, 4, 6, 15, 3]]
    both_ways(cfgs, cohorts, "fedpfn+scaffold", after=in_slots)
    # round 1 joined from the parts (slots made for 5); 2 read in place; 3 (8 clients) joined
    # again and the slots made for 8; 4 read in place. The model went through one shared
    # copy (made in round 1, held by both workers) every round.
    assert seen == [(False, 5, 1, 1, [1, 1]), (True, 5, 1, 1, [1, 1]), (False, 8, 2, 1, [1, 1]), (True, 8, 2, 1, [1, 1])]


def test_clients_are_dealt_by_size_each_share_in_client_order():
    shares = deal([5, 50, 10, 40, 5, 10], workers=2)
    assert shares == [[1, 5], [0, 2, 3, 4]]  # 50 + 10 against 5 + 10 + 40 + 5: 60 each
    assert sorted(k for share in shares for k in share) == list(range(6))
    assert deal([3, 3], workers=4) == [[0], [1]]  # no empty share
    assert deal([1, 2, 3], workers=1) == [[0, 1, 2]]


@pytest.mark.slow  # three short runs stopped in their second round, about 20 s
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["int", "term", "kill"])
def test_no_worker_outlives_a_stopped_run(sig, tmp_path):
    command = [str(Path(sys.executable).with_name("fedpfn")), "run", "--model", "mlp", "--num-clients", "40",
               "--clients-per-round", "8", "--rounds", "200", "--partition", "iid", "--engine-mode", "processes",
               "--eval-every", "200", "--out", str(tmp_path / "run")]  # fmt: skip
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.read_text().count("\n") >= 1) and time.monotonic() < deadline:
        assert driver.poll() is None, driver.stderr.read()
        time.sleep(0.1)
    workers = children(driver.pid)
    assert len(workers) >= 2, workers
    driver.send_signal(sig)
    driver.wait(timeout=30)
    deadline = time.monotonic() + 5
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(w) for w in workers), f"left behind after {sig.name}: {workers}"


def test_the_processes_mode_is_refused_where_it_cannot_train(monkeypatch, tmp_path):
    """On a cluster each actor trains its share; with a visible GPU the clients would leave it."""
    from fedpfn.core.settings import ConfigError
    from fedpfn.runtime.engines import batched

    on_cluster = tiny_config(engine_mode="processes", ray_address="127.0.0.1:1", out=str(tmp_path / "a"))
    with pytest.raises(ConfigError, match="engine_mode: processes trains on this machine; with --ray-address"):
        batched.prepare(on_cluster)
    monkeypatch.setattr(batched, "device_of", lambda cfg: torch.device("cuda"))
    with pytest.raises(ConfigError, match="a GPU is visible: add --client-gpus 0, or use vmap"):
        batched.prepare(tiny_config(engine_mode="processes", out=str(tmp_path / "b")))
