"""The batched engine equals the ClientApp: per client rule, anchor method, model family and optimizer.

Each case runs three rounds of a real strategy over clients of unequal sizes with ragged last
batches. Every round, each sampled client trains twice from the same message: through the
sequential ClientApp path (`local_round`, one client at a time) and as one vmapped
cohort (`CohortProgram(...).train(Vmap)`, the batched engine's program). Each keeps its
own client state across rounds (SCAFFOLD's c_i, FedDyn's gradient, MOON's previous model),
so state that drifted would show. Compared: every reply array (parameters, BatchNorm
buffers and counters, FedPNU's packed entries), every record a rule adds, every metric but
the time, and every record of the client state: to 1e-10 relative in float64, and in
float32 (oneDNN off: under vmap it differs by up to 3e-3 otherwise) 1e-5 for the model and
metrics and 1e-4 for update records and client state (SCAFFOLD's c_i and FedDyn's gradient
hold the cancellation x − y, divided by K·lr or scaled by alpha; float64 allows them 1e-9).
A gap is record by record: max |a − b| over its entries relative to its largest entry. The
global model of the next round is the strategy's aggregate of the sequential replies.

In float32 a ResNet-20 client of several steps is chaotic under either path: a ReLU input
at zero goes one way or the other and one channel's gradient changes (measured: 1e-6 after
two steps, 4e-3 after three, on the same batches), so its float32 cases train one step a
round (batch larger than every client); float64 covers its multi-step rounds. Even one step
of its first convolution sums 64 x 784 products per weight, in another order under vmap
(a grouped convolution): 8e-5 of the weights' scale, so ResNet-20's float32 bounds are 1e-4
and 1e-2 (measured 8e-5 and 1.2e-3).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Message, RecordDict

from fedpfn.core import protocol
from fedpfn.core.cache import initial_model
from fedpfn.core.files import CLIENT_STATE, CLIENTS, CONFIG, METRICS, read_jsonl
from fedpfn.core.groups import Vmap
from fedpfn.runtime.algorithms import ANCHOR_METHODS, CLIENT_RULES, build_strategy, client_rules
from fedpfn.runtime.engines import stacked
from fedpfn.runtime.engines.prepared import ClientJob
from fedpfn.runtime.engines.program import CohortProgram, local_round
from fedpfn.runtime.server import train_config, with_accepted_round
from fedpfn.runtime.simulation import simulate
from strategies import sample_clients
from tests.support.config import tiny_config
from tests.support.rounds import first_fast, NodeGrid

OWN_HPARAMS = {"fedprox": {"prox_mu": 0.1}, "feddyn": {"feddyn_alpha": 0.1}}
ANCHORS = ["", *ANCHOR_METHODS]
# (model and metrics, update records and state), by dtype and model
TOLERANCE = {torch.float64: (1e-10, 1e-9), torch.float32: (1e-5, 1e-4)}
RESNET_FLOAT32 = (1e-4, 1e-2)


def optimizers(rule: str) -> list[str]:
    return [o for o in ("sgd", "adam") if o in CLIENT_RULES[rule].optimizers]


# the whole matrix on the MLP and the CNN; on ResNet-20 (BatchNorm) every rule, the anchor
# method and the optimizer cycling (a float64 ResNet-20 round is slow on a 2-core machine).
# make test-fast keeps the first ResNet-20 case: a rule that needs BatchNorm (FedBN), first.
NO_NORM = [r for r in CLIENT_RULES if not CLIENT_RULES[r].personal_layers]  # FedBN needs BatchNorm layers
FULL = [(r, a, m, o) for m in ("mlp", "cnn") for r in NO_NORM for a in ANCHORS for o in optimizers(r)]
RESNET = sorted(
    [
        (rule, ANCHORS[i % len(ANCHORS)], "resnet20", optimizers(rule)[i % len(optimizers(rule))])
        for i, rule in enumerate(CLIENT_RULES)
    ],
    key=lambda case: case[0] in NO_NORM,
)
FLOAT32_RULES = (("fedavg", "fedpnu"), ("scaffold", "fedpfn"), ("moon", ""))
FLOAT32 = [(r, a, m, "sgd") for m in ("mlp", "cnn") for r, a in FLOAT32_RULES]
FLOAT32_RESNET = [(r, a, "resnet20", "sgd") for r, a in FLOAT32_RULES]
ONE_STEP = {"resnet20": 64}  # float32: the batch size that makes every client's round one step


def case_config(rule: str, anchor: str, model: str, optimizer: str, **overrides):
    """3000 clients of 17-33 images (Dirichlet 1: unequal), batch 10 (ragged, never a last batch
    of one: BatchNorm over one sample is too ill-conditioned for a float32 comparison), 3 a round."""
    algorithm = f"{anchor}+{rule}" if anchor and rule != "fedavg" else (anchor or rule)
    lr = 0.01 if optimizer == "adam" else 0.05
    values = dict(
        algorithm=algorithm, model=model, optimizer=optimizer, lr=lr, num_clients=3000, clients_per_round=3,
        batch_size=10, partition="dirichlet", alpha=1.0, min_partition_size=5, seed=3, **OWN_HPARAMS.get(rule, {}),
    )  # fmt: skip
    return tiny_config(**{**values, **overrides})


def in_dtype(arrays: dict[str, np.ndarray], dtype: torch.dtype) -> dict[str, np.ndarray]:
    """Floating arrays in `dtype` (the model the messages carry), integer counters as they are."""
    target = np.float64 if dtype == torch.float64 else np.float32
    return {n: a.astype(target) if np.issubdtype(a.dtype, np.floating) else a for n, a in arrays.items()}


def record_gap(mine: ArrayRecord, theirs: ArrayRecord, where: str) -> float:
    """max |a − b| over every entry of a record, relative to its largest |b|: float32 sums of a
    parameter that starts at zero (a BatchNorm shift) are off by a few ulp of the whole
    model's scale, which is large relative to that parameter alone."""
    assert list(mine) == list(theirs), f"{where}: other entries"
    error = scale = 0.0
    for name in theirs:
        a, b = mine[name].numpy(), theirs[name].numpy()
        assert a.shape == b.shape and a.dtype == b.dtype, f"{where}.{name}: {a.shape} {a.dtype} != {b.shape} {b.dtype}"
        a, b = a.astype(np.float64), b.astype(np.float64)
        if a.size:
            error, scale = max(error, float(np.abs(a - b).max())), max(scale, float(np.abs(b).max()))
    return error / max(scale, 1e-30)


def compare_contents(batched: RecordDict, sequential: RecordDict, where: str) -> tuple[float, float]:
    """(the model's and the metrics' largest relative gap, the other records'): two replies or two states."""
    assert set(batched.array_records) == set(sequential.array_records), where
    model = derived = 0.0
    for key, record in sequential.array_records.items():
        gap = record_gap(batched.array_records[key], record, f"{where} {key}")
        model, derived = (max(model, gap), derived) if key == protocol.ARRAYS else (model, max(derived, gap))
    for key, record in sequential.metric_records.items():
        for name, value in record.items():
            if name != protocol.TRAIN_SECONDS:
                mine = batched.metric_records[key][name]
                model = max(model, abs(mine - value) / max(abs(value), 1e-30))
    return model, derived


def three_rounds(rule: str, anchor: str, model: str, optimizer: str, dtype: torch.dtype, tmp: Path) -> tuple[float, float]:
    """(the largest relative gap of a reply's model and metrics, of its update records and the
    client state) over three rounds."""
    extra = {"batch_size": ONE_STEP[model]} if dtype == torch.float32 and model in ONE_STEP else {}
    sequential_cfg = case_config(rule, anchor, model, optimizer, out=str(tmp / "sequential"), **extra)
    batched_cfg = case_config(rule, anchor, model, optimizer, out=str(tmp / "batched"), **extra)  # its own client_state/
    net = initial_model(sequential_cfg)
    strategy = build_strategy(sequential_cfg, net)
    arrays = protocol.to_array_record(in_dtype(protocol.to_numpy(ArrayRecord(net.state_dict())), dtype))
    rules, cpu = client_rules(sequential_cfg), torch.device("cpu")
    states = {"sequential": {}, "batched": {}}
    gap = state_gap = 0.0
    for server_round in (1, 2, 3):
        chosen = sample_clients(sequential_cfg.seed, server_round, sequential_cfg.federation.num_clients, 3)
        config = train_config(sequential_cfg, server_round)
        messages = list(strategy.configure_train(server_round, arrays, config, NodeGrid(chosen)))
        messages = [with_accepted_round(m, server_round - 1) for m in messages]
        seq_states = [states["sequential"].setdefault(p, RecordDict()) for p in chosen]
        bat_states = [states["batched"].setdefault(p, RecordDict()) for p in chosen]
        replies = [
            local_round(rules, sequential_cfg, p, s, cpu, m.content) for p, s, m in zip(chosen, seq_states, messages)
        ]
        jobs = [ClientJob(p, s, server_round - 1) for p, s in zip(chosen, bat_states)]
        result = CohortProgram(rules, batched_cfg, messages[0].content, cpu, jobs).train(Vmap)
        for k, pid in enumerate(chosen):
            where = f"round {server_round} client {pid}"
            model, derived = compare_contents(result.reply_content(k), replies[k], where)
            gap, state_gap = max(gap, model), max(state_gap, derived, *compare_contents(bat_states[k], seq_states[k], where))
        arrays, _ = strategy.aggregate_train(server_round, [Message(r, reply_to=m) for r, m in zip(replies, messages)])
    return gap, state_gap


def ids(cases: list[tuple[str, ...]]) -> list[str]:
    return ["-".join(filter(None, case)) for case in cases]


@pytest.mark.parametrize("rule,anchor,model,optimizer", FULL + first_fast(RESNET), ids=ids(FULL + RESNET))
def test_batched_equals_the_clientapp_in_float64(rule, anchor, model, optimizer, tmp_path):
    gaps = three_rounds(rule, anchor, model, optimizer, torch.float64, tmp_path)
    assert all(g < t for g, t in zip(gaps, TOLERANCE[torch.float64])), gaps


@pytest.mark.parametrize(
    "rule,anchor,model,optimizer", FLOAT32 + first_fast(FLOAT32_RESNET), ids=ids(FLOAT32 + FLOAT32_RESNET)
)
def test_batched_equals_the_clientapp_in_float32(rule, anchor, model, optimizer, tmp_path):
    with torch.backends.mkldnn.flags(enabled=False):
        gaps = three_rounds(rule, anchor, model, optimizer, torch.float32, tmp_path)
    bounds = RESNET_FLOAT32 if model == "resnet20" else TOLERANCE[torch.float32]
    assert all(g < t for g, t in zip(gaps, bounds)), gaps


# --- whole runs ---------------------------------------------------------------------------------

TIMING = ("seconds", "train_seconds")  # what differs between any two runs


def rows(folder: Path, name: str) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in read_jsonl(folder / name)]


@pytest.mark.slow  # about 30 s idle: Ray's start and a run on each engine
def test_a_batched_run_equals_a_ray_run(tmp_path):
    """SCAFFOLD under FedPFN on FedAdam (client, server-rule and server-optimizer state at once),
    with seeded failures, min-replies, a local test split, evaluation every 2 rounds and federated
    evaluation: metrics.jsonl (the clients' figures among them) and
    clients.jsonl of the batched engine (`threads`: each client trained as the ClientApp trains it)
    equal the Ray engine's, bit for bit, and so does the model. The suite's one such pair of runs:
    each Ray start costs about 20 s on 2 cores."""
    common = dict(
        algorithm="fedpfn+scaffold", server="fedadam", server_lr=0.003, num_clients=6, clients_per_round=3, rounds=3,
        simulate_failures=0.25, min_replies=2, local_test_fraction=0.2, eval_every=2, batch_size=200,
        evaluate_clients=0.75,
    )  # fmt: skip
    runs = {}
    for engine, extra in (("ray", {}), ("batched", {"engine_mode": "threads"})):
        runs[engine] = tmp_path / engine
        simulate(tiny_config(engine=engine, out=str(runs[engine]), **extra, **common), show_progress=False)
    metrics = rows(runs["batched"], METRICS)
    assert metrics == rows(runs["ray"], METRICS)
    assert any(row["failed_partitions"] for row in metrics), "the failures were not exercised"
    evaluated = [row for row in metrics if row.get("fed_eval_clients")]
    assert evaluated and all(row["fed_eval_accuracy_worst"] is not None for row in evaluated), "no client evaluated"
    assert rows(runs["batched"], CLIENTS) == rows(runs["ray"], CLIENTS)
    final = [torch.load(runs[e] / "model_round_3.pt", weights_only=True) for e in ("batched", "ray")]
    assert all(torch.equal(final[0][name], final[1][name]) for name in final[1])
    engines = [json.loads((runs[e] / CONFIG).read_text())["provenance"]["engine"] for e in ("batched", "ray")]
    assert engines == ["batched", "ray"]


def cohort_round(cfg, dtype: torch.dtype, chunk: int | None) -> list[RecordDict]:
    """Round 1 of `cfg` as one vmapped cohort in chunks of `chunk`: the replies, then the client states."""
    net = initial_model(cfg)
    strategy = build_strategy(cfg, net)
    arrays = protocol.to_array_record(in_dtype(protocol.to_numpy(ArrayRecord(net.state_dict())), dtype))
    chosen = sample_clients(cfg.seed, 1, cfg.federation.num_clients, cfg.federation.clients_per_round)
    (message, *_) = strategy.configure_train(1, arrays, train_config(cfg, 1), NodeGrid(chosen))
    states = [RecordDict() for _ in chosen]
    jobs = [ClientJob(p, s, 0) for p, s in zip(chosen, states)]
    result = CohortProgram(client_rules(cfg), cfg, with_accepted_round(message, 0).content, torch.device("cpu"), jobs).train(
        Vmap, chunk=chunk
    )
    return [result.reply_content(k) for k in range(len(chosen))] + states


def test_chunked_rounds_and_a_chunk_out_of_memory_give_the_numbers_of_one_program(tmp_path, monkeypatch):
    """SCAFFOLD under FedPNU on ResNet-20 (BatchNorm, client state, packed replies), 4 clients:
    one program, chunks of 1 and 3, and chunks that run out of memory above 1 client (retried
    in halves) give the same replies and client states."""
    def config(name: str):
        return case_config("scaffold", "fedpnu", "resnet20", "sgd", clients_per_round=4, out=str(tmp_path / name))

    whole = cohort_round(config("whole"), torch.float64, None)
    real_train = stacked.train_stacked

    def out_of_memory_above_one(cohort, members):
        if len(members) > 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_train(cohort, members)

    for name, chunk in (("ones", 1), ("threes", 3)):
        gaps = [compare_contents(a, b, name) for a, b in zip(cohort_round(config(name), torch.float64, chunk), whole)]
        assert max(max(g) for g in gaps) < 1e-12, (name, gaps)
    monkeypatch.setattr(stacked, "train_stacked", out_of_memory_above_one)
    halved = cohort_round(config("halved"), torch.float64, None)
    assert max(max(compare_contents(a, b, "halved")) for a, b in zip(halved, whole)) < 1e-12


@pytest.mark.slow  # about 18 s idle: Ray's actors start and load the data
def test_a_round_split_over_two_ray_actors_equals_one_program(tmp_path):
    """--engine-workers 2 on the CPU: SCAFFOLD's clients trained in two Ray actors (their state
    sent with each job and written back into the run folder by this process) give the run of
    one in-process cohort, bit for bit, client-state files included."""
    # vmap named: the one program both ways (auto would be threads, bit for bit the same too)
    common = dict(algorithm="scaffold", num_clients=6, clients_per_round=4, rounds=2, batch_size=200, engine="batched",
                  engine_mode="vmap")  # fmt: skip
    here, actors = tmp_path / "here", tmp_path / "actors"
    simulate(tiny_config(out=str(here), **common), show_progress=False)
    simulate(tiny_config(out=str(actors), engine_workers=2, **common), show_progress=False)
    assert rows(actors, METRICS) == rows(here, METRICS)
    assert rows(actors, CLIENTS) == rows(here, CLIENTS)
    saved = [sorted((p.relative_to(d), p.read_bytes()) for p in (d / CLIENT_STATE).rglob("*.npz")) for d in (here, actors)]
    assert saved[0] and saved[0] == saved[1]  # the actors' state written back where a resume reads it


def test_client_masks_in_a_cohort_equal_the_clientapp(tmp_path, monkeypatch):
    """Each client's own anchors (and SCAFFOLD reading them) as one vmapped program, in float64."""
    monkeypatch.setitem(OWN_HPARAMS, "scaffold", {"anchor_masks": "client"})
    gaps = three_rounds("scaffold", "fedpfn", "cnn", "sgd", torch.float64, tmp_path)
    assert all(g < t for g, t in zip(gaps, TOLERANCE[torch.float64])), gaps


def test_moon_with_its_projection_head_in_a_cohort_equals_the_clientapp(tmp_path, monkeypatch):
    monkeypatch.setitem(OWN_HPARAMS, "moon", {"projection_head": 64})
    gaps = three_rounds("moon", "fedpfn", "cnn", "sgd", torch.float64, tmp_path)
    assert all(g < t for g, t in zip(gaps, TOLERANCE[torch.float64])), gaps
