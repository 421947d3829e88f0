"""`checkpoint.npz`: the model and the strategy's state, tied to the settings they came from."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np

from fedpfn.core.files import CHECKPOINT, DamagedFile, atomic_write_bytes, json_text
from fedpfn.core.hyper import changed_settings
from fedpfn.core.tree import TREE_ERRORS, read_tree, read_tree_index, tree_bytes
from fedpfn.runtime.runfolder.folder import FolderBase, RunFolderError


def fingerprint_hash(fingerprint: dict[str, Any]) -> str:
    return hashlib.sha256(json_text(fingerprint).encode()).hexdigest()


def checkpoint_problem(tree: dict[str, Any]) -> str | None:
    """What makes a loaded checkpoint unusable (a resume would fail or train from nonsense), or None."""
    done, elapsed = tree.get("round"), tree.get("elapsed_seconds")
    if isinstance(done, bool) or not isinstance(done, int) or done < 1:
        return f"its round is {done!r}, not a whole number >= 1"
    if isinstance(elapsed, bool) or not isinstance(elapsed, int | float) or not 0 <= elapsed < math.inf:
        return f"its elapsed_seconds is {elapsed!r}"
    model = tree.get("model")
    if not isinstance(model, dict) or not model:
        return "it holds no model"
    odd = [k for k, v in model.items() if not isinstance(v, np.ndarray) or v.dtype.kind not in "biuf"]
    if odd:
        return f"its model entry '{odd[0]}' is not a numeric array"
    if not isinstance(tree.get("strategy"), dict):
        return "it holds no strategy state"
    return None


def checkpoint_bytes(fingerprint: dict[str, Any], tree: dict[str, Any]) -> bytes:
    """The checkpoint file's bytes: `tree` with the settings it belongs to."""
    meta = {"fingerprint": fingerprint, "fingerprint_sha256": fingerprint_hash(fingerprint)}
    return tree_bytes({"meta": meta, **tree})


class FolderCheckpoints(FolderBase):
    """Arrays and plain values only (fedpfn.core.tree), replaced atomically; other settings refused."""

    def save_checkpoint(self, fingerprint: dict[str, Any], tree: dict[str, Any]) -> None:
        self.write_checkpoint(checkpoint_bytes(fingerprint, tree))

    def write_checkpoint(self, data: bytes) -> None:
        """`data` (checkpoint_bytes') as the checkpoint, replaced atomically."""
        atomic_write_bytes(self.path / CHECKPOINT, data)

    def saved_fingerprint(self) -> dict[str, Any] | None:
        """The settings the checkpoint says it belongs to (None without a checkpoint), arrays unread."""
        path = self.path / CHECKPOINT
        if not path.exists() and not path.is_symlink():
            return None
        try:
            saved = read_tree_index(path)["meta"]["fingerprint"]
        except (*TREE_ERRORS, DamagedFile) as err:
            raise RunFolderError(f"{path} is damaged ({type(err).__name__}); the run cannot be resumed") from None
        if not isinstance(saved, dict):
            raise RunFolderError(f"{path} is damaged (no settings); the run cannot be resumed")
        return saved

    def check_belongs(self, fingerprint: dict[str, Any]) -> bool:
        """Whether there is a checkpoint; one of other settings than `fingerprint` is refused.

        Only its index is read, so this is cheap, and it comes before anything the settings
        name is imported (fedpfn.runtime.simulation.resume_config).
        """
        saved = self.saved_fingerprint()
        if saved is None:
            return False
        # by name (fedpfn.core.hyper): a checkpoint written before the namespaces said `prox_mu`
        if changed := changed_settings(saved, fingerprint):
            shown = ", ".join(f"{k}: {old} -> {new}" for k, old, new in changed[:5])
            raise RunFolderError(
                f"{self.path / CHECKPOINT} belongs to other settings ({shown}); was config.json edited? "
                "it cannot resume this run"
            )
        return True

    def load_checkpoint(self, fingerprint: dict[str, Any]) -> dict[str, Any] | None:
        """The checkpoint of the run with these settings, None if there is none; other settings refused."""
        path = self.path / CHECKPOINT
        if not self.check_belongs(fingerprint):
            return None
        try:
            tree = read_tree(path)
            tree.pop("meta")
        except (*TREE_ERRORS, DamagedFile) as err:
            raise RunFolderError(f"{path} is damaged ({type(err).__name__}); the run cannot be resumed") from None
        problem = checkpoint_problem(tree)
        if problem:
            raise RunFolderError(f"{path} is damaged ({problem}); the run cannot be resumed")
        return tree

    def checkpoint_round(self) -> int:
        """The round the checkpoint holds (0 without one, or with a damaged one); reads only its index."""
        try:
            done = read_tree_index(self.path / CHECKPOINT)["round"]
        except (*TREE_ERRORS, DamagedFile):
            return 0
        return done if isinstance(done, int) and not isinstance(done, bool) and done > 0 else 0
