"""A cohort after training: its replies' contents as plain stacked tensors, and each client's
metrics and state for its next round."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from fedpfn.core import protocol
from fedpfn.core.personal import PERSONAL, left_out
from fedpfn.core.protocol import Arrays
from fedpfn.core.training import Tensors
from fedpfn.runtime.engines.prepared import ClientTrained, PreparedCohort
from fedpfn.runtime.engines.trees import concatenate, interleave


@dataclass
class CohortResult:
    """The cohort after training, as plain tensors (client first) and per-client figures.

    Nothing in it refers back to the rules, so a cohort trained elsewhere (a Ray actor) comes
    back whole, and results of parts of a round concatenate (`merge`).
    """

    partition_ids: list[int]
    entries: list[str]  # the model's state_dict names, in order
    params: Tensors  # the uploaded parameters (after the rules' `uploaded`), stacked
    buffers: Tensors  # stacked
    records: dict[str, Tensors]  # the rules' reply records (SCAFFOLD's delta), stacked
    metrics: list[dict[str, float | int]]  # per client, as its reply's METRICS
    upload_mask: Arrays | None  # entries every reply leaves out (FedPNU's anchors, personal entries)

    def client_arrays(self, k: int) -> Arrays:
        """Client k's uploaded model as numpy arrays, in state_dict order."""
        merged = {**self.params, **self.buffers}
        return {name: merged[name][k].detach().cpu().numpy() for name in self.entries}

    def reply_content(self, k: int) -> RecordDict:
        """Client k's reply, exactly as the ClientApp sends it."""
        merged = {**self.params, **self.buffers}
        state_dict = {name: merged[name][k].detach().cpu() for name in self.entries}
        content = RecordDict({protocol.ARRAYS: ArrayRecord(state_dict), protocol.METRICS: MetricRecord(self.metrics[k])})
        for key, stacks in self.records.items():
            content[key] = protocol.to_array_record({n: v[k].detach().cpu().numpy() for n, v in stacks.items()})
        if self.upload_mask is not None:
            protocol.pack_reply(content, self.upload_mask)
        return content

    def to(self, device: torch.device) -> CohortResult:
        move = lambda stacks: {n: v.to(device) for n, v in stacks.items()}  # noqa: E731
        records = {key: move(stacks) for key, stacks in self.records.items()}
        return dataclasses.replace(self, params=move(self.params), buffers=move(self.buffers), records=records)

    @classmethod
    def merge(cls, parts: Sequence[CohortResult], shares: Sequence[Sequence[int]] | None = None) -> CohortResult:
        """Parts of one round as one result: consecutive blocks in client order, or part i
        holding the round's clients at positions `shares[i]`."""
        join = concatenate if shares is None else (lambda trees: interleave(trees, shares))
        return cls(
            partition_ids=join([part.partition_ids for part in parts]),
            entries=parts[0].entries,
            params=join([part.params for part in parts]),
            buffers=join([part.buffers for part in parts]),
            records=join([part.records for part in parts]),
            metrics=join([part.metrics for part in parts]),
            upload_mask=parts[0].upload_mask,
        )


def cohort_result(cohort: PreparedCohort, trained: ClientTrained) -> CohortResult:
    """The replies' contents, metrics per client, and each client's state kept for its next round."""
    params, buffers, personal = _personal_kept(cohort, trained.params, trained.buffers)
    result = CohortResult(
        partition_ids=[c.partition_id for c in cohort.clients],
        entries=cohort.entries,
        params=params,
        buffers=buffers,
        records=cohort.rules.reply_records(trained.outputs),
        metrics=[],
        upload_mask=_upload_mask(cohort),
    )
    stateful = [rule for rule in cohort.rules.rules if rule.state_keys]
    for k, client in enumerate(cohort.clients):
        outputs_k = {name: value[k].detach().cpu().numpy() for name, value in trained.outputs.items()}
        tally = trained.tallies[k]
        metrics: dict[str, float | int] = {
            protocol.TRAIN_LOSS: float(tally.loss) / max(client.steps, 1),
            protocol.TRAIN_ACCURACY: tally.accuracy,
            protocol.NUM_EXAMPLES: len(client.data.train),
            protocol.PARTITION_ID: client.partition_id,
            protocol.TRAIN_SECONDS: trained.seconds[k],
        }
        if trained.local_accuracy[k] is not None:
            metrics[protocol.LOCAL_ACC_BEFORE], metrics[protocol.LOCAL_ACC_AFTER] = trained.local_accuracy[k]
        metrics.update(cohort.rules.reply_metrics(outputs_k))
        result.metrics.append(metrics)
        if personal:
            own = {name: value[k].detach().cpu().numpy() for name, value in personal.items()}
            client.state.save(PERSONAL, protocol.to_array_record(own), cohort.round.server_round)
        if stateful:
            uploaded = result.client_arrays(k)
            for rule in stateful:
                rule.save_state(client, uploaded, outputs_k)
    return result


def _personal_kept(cohort: PreparedCohort, params: Tensors, buffers: Tensors) -> tuple[Tensors, Tensors, Tensors]:
    """(params, buffers) as uploaded, the personal entries back at the global model's values
    (so no total or reply carries a client's own), and the personal entries as trained."""
    personal = cohort.round.personal
    received = {**cohort.round.start, **cohort.round.start_buffers}
    trained = {name: value for name, value in {**params, **buffers}.items() if name in personal}
    reset = lambda stacks: {n: received[n].expand_as(v).clone() if n in personal else v for n, v in stacks.items()}  # noqa: E731
    return (reset(params), reset(buffers), trained) if personal else (params, buffers, {})


def _upload_mask(cohort: PreparedCohort) -> Arrays | None:
    """The entries every reply leaves out: the rules' (FedPNU's anchors) and the personal ones."""
    masks = [m for m in (cohort.rules.upload_mask(),) if m is not None]
    if cohort.round.personal:
        masks.append(left_out(cohort.round.personal, {**cohort.round.start, **cohort.round.start_buffers}))
    return {name: m for mask in masks for name, m in mask.items()} or None
