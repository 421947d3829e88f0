"""FedAvg's client: local SGD over the one training loop. Every algorithm extends it.

A subclass changes behaviour only through the hooks: `begin_round`, `loss_term`,
`after_backward`, `after_step`, `end_round` and `upload`. Hooks call `super()` so that
anchors (a mixin) combine with any client rule.
"""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from torch import nn

from clients.state import ClientStateStore
from fedpfn.config import RunConfig
from fedpfn.training import NoHooks, make_optimizer, minibatches, train_local
from fedpfn.workspace import client_indices, dataset_on, model_skeleton


def data_order_seed(run_seed: int, server_round: int, partition_id: int) -> int:
    """Each client's shuffle in each round: reproducible, and independent of the worker."""
    return (run_seed * 1_000_003 + server_round * 10_007 + partition_id) % (2**63 - 1)


class FedAvgClient(NoHooks):
    """Local SGD with momentum and weight decay; uploads the whole trained model."""

    def __init__(self, cfg: RunConfig, partition_id: int, state: RecordDict, device: torch.device):
        self.cfg = cfg
        self.partition_id = partition_id
        self.state = state  # Flower's context.state: persists across rounds for this node
        self.device = device
        self.global_params: dict[str, torch.Tensor] = {}

    def fit(self, content: RecordDict) -> RecordDict:
        """One round of local training from the received global model and config."""
        arrays, config = content.array_records["arrays"], content.config_records["config"]
        server_round = self.server_round = int(config["server-round"])
        self.resumed_from = int(config.get("resumed-from", 0))
        data = dataset_on(self.cfg, self.device)
        indices = client_indices(self.cfg)[self.partition_id]
        model = model_skeleton(self.cfg, self.device)
        model.load_state_dict(arrays.to_torch_state_dict())
        self.global_params = {n: p.detach().clone() for n, p in model.named_parameters()}
        self.begin_round(model, content)
        optimizer = make_optimizer(
            model, self.cfg.optimizer, float(config["lr"]), self.cfg.momentum, self.cfg.weight_decay
        )
        generator = torch.Generator().manual_seed(
            data_order_seed(self.cfg.seed, server_round, self.partition_id)
        )
        batches = minibatches(indices, self.cfg.batch_size, self.cfg.local_epochs, generator)
        loss, steps = train_local(model, data.train_x, data.train_y, batches, optimizer, hooks=self)
        self.end_round(model, config, steps)
        metrics = MetricRecord(
            {"train-loss": loss, "num-examples": len(indices), "partition-id": self.partition_id}
        )
        return RecordDict({"arrays": self.upload(model, config), "metrics": metrics, **self.extra_records()})

    # --- hooks ---------------------------------------------------------------------------

    def begin_round(self, model: nn.Module, content: RecordDict) -> None:
        """Called after the global weights are loaded, before the first step.

        `content` is the whole server message: the config and any server state records.
        """

    def end_round(self, model: nn.Module, config: ConfigRecord, steps: int) -> None:
        """Called after the last step, before the upload."""

    def upload(self, model: nn.Module, config: ConfigRecord) -> ArrayRecord:
        """What goes back to the server: the whole state_dict by default."""
        return ArrayRecord(model.state_dict())

    # --- persistent client state (SCAFFOLD's c_i, FedDyn's gradient) -----------------------

    def persistent(self, key: str) -> ArrayRecord | None:
        """This client's record `key` from earlier rounds, or None in its first round.

        After a resume the process is new and `context.state` empty: the record then
        comes from disk, as it was at the checkpoint the run resumed from.
        """
        record = self.state.array_records.get(key)
        if record is None and self.resumed_from > 0:
            record = self._store().load(key, up_to_round=self.resumed_from)
        return record

    def persist(self, key: str, record: ArrayRecord) -> None:
        """Keep `record` for this client's next round, and on disk when checkpointing."""
        self.state[key] = record
        every = self.cfg.checkpoint_every
        if every:
            last_checkpoint = (self.server_round - 1) // every * every
            self._store().save(key, record, self.server_round, last_checkpoint)

    def _store(self) -> ClientStateStore:
        return ClientStateStore(self.cfg.run_dir, self.partition_id)

    def extra_records(self) -> dict[str, ArrayRecord]:
        """Further records for the server (e.g. SCAFFOLD's control-variate change)."""
        return {}
