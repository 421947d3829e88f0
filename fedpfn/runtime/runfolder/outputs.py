"""What a run leaves beside its rows and checkpoint: `summary.json` (written last) and saved models."""

from __future__ import annotations

import io
from typing import Any

import torch

from fedpfn.core.files import SUMMARY, atomic_write_bytes, atomic_write_json, model_file
from fedpfn.runtime.runfolder.folder import FolderBase


class FolderOutputs(FolderBase):
    """The summary's presence marks a finished run; `unfinish` takes it away for `--resume --rounds N`."""

    def save_model(self, server_round: int, state_dict: dict[str, torch.Tensor]) -> None:
        buffer = io.BytesIO()
        torch.save(state_dict, buffer)
        atomic_write_bytes(self.path / model_file(server_round), buffer.getvalue())

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_json(self.path / SUMMARY, summary)

    def read_summary(self) -> dict[str, Any]:
        return self._json_object(SUMMARY)

    def unfinish(self) -> None:
        """Make a finished run continuable (`--resume DIR --rounds N`): its summary goes."""
        (self.path / SUMMARY).unlink(missing_ok=True)
