"""The processes mode's shared slots: from the second round the workers write their clients'
tensors into rows every process holds and the driver reads the round there; a round the slots
do not fit comes back as tensors and the slots are made again. Every round equals `loop`, bit
for bit, with state (SCAFFOLD) and reply records (its delta) among the tensors."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Message, RecordDict

from fedpfn.core import protocol
from fedpfn.core.cache import initial_model
from fedpfn.core.groups import Loop
from fedpfn.runtime.algorithms import build_strategy, client_rules
from fedpfn.runtime.engines.prepared import ClientJob
from fedpfn.runtime.engines.processes import ProcessRunner
from fedpfn.runtime.engines.program import CohortProgram
from fedpfn.runtime.engines.result import CohortResult
from fedpfn.runtime.server import train_config, with_accepted_round
from tests.support.config import tiny_config
from tests.support.rounds import NodeGrid

COHORTS = [[3, 8, 1, 5, 12], [2, 3, 9, 14, 7], [1, 2, 3, 4, 5, 6, 10, 11], [0, 8, 9, 13, 4, 6, 15, 3]]


def same_tensors(a: CohortResult, b: CohortResult, where: str) -> None:
    for field in ("params", "buffers"):
        for name, value in getattr(b, field).items():
            assert torch.equal(getattr(a, field)[name], value), f"{where}: {field} {name}"
    for key, stacks in b.records.items():
        for name, value in stacks.items():
            assert torch.equal(a.records[key][name], value), f"{where}: {key} {name}"
    timeless = lambda metrics: [{k: v for k, v in m.items() if k != protocol.TRAIN_SECONDS} for m in metrics]  # noqa: E731
    assert timeless(a.metrics) == timeless(b.metrics), where


def views_of_slots(result: CohortResult, runner: ProcessRunner) -> bool:
    rows = runner.slots.rows["params"] if runner.slots is not None else {}
    return bool(rows) and all(result.params[n].data_ptr() == rows[n].data_ptr() for n in rows)


def test_rounds_read_from_the_slots_equal_the_loop_and_a_larger_round_remakes_them(tmp_path):
    cfgs = {
        way: tiny_config(algorithm="fedpfn+scaffold", num_clients=16, clients_per_round=5, batch_size=16, momentum=0.9,
                         partition="iid", seed=4, out=str(tmp_path / way))
        for way in ("processes", "loop")
    }  # fmt: skip
    net = initial_model(cfgs["loop"])
    strategy = build_strategy(cfgs["loop"], net)
    arrays = ArrayRecord(net.state_dict())
    rules, cpu = client_rules(cfgs["loop"]), torch.device("cpu")
    states: dict[str, dict[int, RecordDict]] = {"processes": {}, "loop": {}}
    runner = ProcessRunner(cfgs["processes"], workers=2)
    seen = []
    try:
        for server_round, chosen in enumerate(COHORTS, start=1):
            config = train_config(cfgs["loop"], server_round)
            messages = [with_accepted_round(m, server_round - 1)
                        for m in strategy.configure_train(server_round, arrays, config, NodeGrid(chosen))]  # fmt: skip
            jobs = {way: [ClientJob(p, states[way].setdefault(p, RecordDict()), server_round - 1) for p in chosen]
                    for way in states}  # fmt: skip
            by_workers = runner(messages[0].content, jobs["processes"])
            seen.append((views_of_slots(by_workers, runner), runner.slots.capacity, runner.slots.generation))
            by_loop = CohortProgram(rules, cfgs["loop"], messages[0].content, cpu, jobs["loop"]).train(Loop)
            same_tensors(by_workers, by_loop, f"round {server_round}")
            replies = [Message(by_loop.reply_content(k), reply_to=m) for k, m in enumerate(messages)]
            arrays, _ = strategy.aggregate_train(server_round, replies)
    finally:
        runner.close()
    # round 1 joined from the parts (slots made for 5); 2 read in place; 3 (8 clients) joined
    # again and the slots made for 8; 4 read in place
    assert seen == [(False, 5, 1), (True, 5, 1), (False, 8, 2), (True, 8, 2)]
