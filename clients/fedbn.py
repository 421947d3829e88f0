"""FedBN (Li et al., ICLR 2021, "FedBN: Federated Learning on Non-IID Features via Local Batch
Normalization"): every BatchNorm layer's scale, shift and running statistics stay with the
client; everything else is averaged as FedAvg does. It is FedAvg with the BatchNorm layers
declared personal (fedpfn.core.personal): kept in the client's state across rounds, left out
of its replies, never anchored, and left as sent by the server.
"""

from __future__ import annotations

from torch import nn

from clients.base import FedAvgClient, client_rule


@client_rule
class FedBNClient(FedAvgClient):
    name = "fedbn"
    personal_layers = (nn.modules.batchnorm._BatchNorm,)
