"""The run's settings in `config.json`, with its provenance beside them; claiming a folder."""

from __future__ import annotations

from typing import Any

from fedpfn.core.files import CONFIG, PROVENANCE, atomic_write_json
from fedpfn.runtime.runfolder.checks import FolderChecks


class FolderConfig(FolderChecks):
    """config.json: written when a run is claimed, what its numbers came from."""

    def start(
        self, config: dict[str, Any], overwrite: bool, provenance: dict[str, Any] | None = None
    ) -> None:
        """Claim the folder for a new run (call under `exclusive`, after every check)."""
        self.check_new_run(overwrite)
        self.remove_own_files()
        self.write_config(config, provenance)

    def _config_json(self) -> dict[str, Any]:
        return self._json_object(CONFIG, "; the run cannot be read")

    def read_config(self) -> dict[str, Any]:
        """The run's settings, as `fedpfn.runtime.algorithms.parse_config` takes them (provenance left out)."""
        return {k: v for k, v in self._config_json().items() if k != PROVENANCE}

    def read_provenance(self) -> dict[str, Any]:
        """Where the run came from (fedpfn.runtime.provenance); {} for a run written before it existed."""
        value = self._config_json().get(PROVENANCE)
        return value if isinstance(value, dict) else {}

    def write_config(self, config: dict[str, Any], provenance: dict[str, Any] | None = None) -> None:
        extra = {} if provenance is None else {PROVENANCE: provenance}
        atomic_write_json(self.path / CONFIG, {**config, **extra})
