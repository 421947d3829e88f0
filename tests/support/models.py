"""Models whose every parameter and statistic is distinct, so a wrong permutation cannot pass unseen."""

from __future__ import annotations

import torch
from torch import nn

from fedpfn.core.models import build_model

def scrambled_model(name: str, shape: tuple[int, int, int], seed: int = 0, **kwargs) -> nn.Module:
    """A model in eval mode whose biases, BN scales, shifts and running statistics are all distinct
    (a freshly built one has BN at 1 and 0, which a wrong spec could permute unnoticed)."""
    torch.manual_seed(seed)
    model = build_model(name, shape, 10, **kwargs)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.running_var.uniform_(0.5, 1.5)
                module.running_mean.normal_(0, 0.2)
                module.num_batches_tracked.fill_(7)
            if getattr(module, "bias", None) is not None:
                module.bias.normal_(0, 0.2)
    return model.eval()


def state_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.detach().clone() for key, value in model.state_dict().items()}
