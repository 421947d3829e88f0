"""A user's own client rule as a file's text, written into a folder that a run then names."""

from __future__ import annotations


USER_RULE = '''
    from dataclasses import dataclass

    import torch.nn.functional as F

    from clients.base import ClientRule
    from fedpfn.core.settings import between, setting


    @dataclass(frozen=True)
    class SmoothingParams:
        smoothing: float = setting(0.1, "label smoothing of the user's rule", between(0, 1, high_open=True))


    class LabelSmoothing(ClientRule):
        """Cross-entropy with label smoothing: a user's rule, in a module of its own."""

        name = "label-smoothing"
        Params = SmoothingParams

        def criterion(self, logits, targets, per_client):
            return F.cross_entropy(logits, targets, label_smoothing=self.hyper.smoothing)
'''
