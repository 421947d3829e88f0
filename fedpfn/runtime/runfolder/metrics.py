"""`metrics.jsonl` and `clients.jsonl`: one row per round, appended, read back strictly."""

from __future__ import annotations

import os
from typing import Any

from fedpfn.core.files import (
    CLIENTS,
    METRICS,
    DamagedFile,
    append_text,
    atomic_write_bytes,
    json_text,
    read_jsonl,
)
from fedpfn.runtime.runfolder.folder import FolderBase, RunFolderError


def _is_ints(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


ROW_CHECKS = {  # the keys of a metrics row that a resume and the summary read back
    "clients": _is_ints,
    "failed_partitions": _is_ints,
    "missing_partitions": _is_ints,
    "skipped": lambda v: isinstance(v, bool),
    "num_failures": _is_number,
    "bytes_up": _is_number,
    "bytes_down": _is_number,
}


def row_problem(row: dict[str, Any]) -> str | None:
    """Why a metrics row cannot be read back as the tool wrote it, or None."""
    bad = [key for key, ok in ROW_CHECKS.items() if not ok(row.get(key))]
    scores = [k for k in row if k.endswith(("_accuracy", "_loss"))]
    bad += [k for k in scores if row[k] is not None and not _is_number(row[k])]
    return f"'{bad[0]}' is {row.get(bad[0])!r}" if bad else None


class FolderMetrics(FolderBase):
    """Rows 1..n in order; a line cut by a kill is the only damage tolerated, and only at the end."""

    def append_metrics(self, *records: dict[str, Any], name: str = METRICS) -> None:
        """`records` appended as lines in one durable write (a round's client rows: one fsync, not one a client)."""
        if records:
            append_text(self.path / name, "".join(json_text(record) + "\n" for record in records))

    def sizes(self) -> dict[str, int]:
        """The metrics files' sizes now: what `truncate_to` returns them to if a round's writes fail."""
        names = [name for name in (METRICS, CLIENTS) if (self.path / name).exists()]
        return {name: (self.path / name).stat().st_size for name in names}

    def truncate_to(self, sizes: dict[str, int]) -> None:
        """Drop what was appended since `sizes` was taken (a round whose checkpoint failed)."""
        for name in (METRICS, CLIENTS):
            path = self.path / name
            if path.exists() and not path.is_symlink():
                os.truncate(path, sizes.get(name, 0))

    def read_metrics(self) -> list[dict[str, Any]]:
        """Rounds 1..n; a last line cut by a kill is dropped, any other damage refused.

        clients.jsonl is checked too: a resume rewrites both files, and every entry point
        reads the metrics before it touches the folder.
        """
        self._client_rows()
        rows = self._read_lines(METRICS)
        for expected, row in enumerate(rows, start=1):
            if row.get("round") != expected or isinstance(row.get("round"), bool):
                raise RunFolderError(
                    f"{self.path / METRICS} is damaged: line {expected} holds round {row.get('round')}, "
                    f"expected {expected}"
                )
            problem = row_problem(row)
            if problem:
                raise RunFolderError(f"{self.path / METRICS} is damaged: line {expected}: {problem}")
        return rows

    def _read_lines(self, name: str) -> list[dict[str, Any]]:
        try:
            return read_jsonl(self.path / name)
        except DamagedFile as err:
            raise RunFolderError(f"{err}; the run cannot be resumed or read") from None

    def keep_metrics_up_to(self, last_round: int) -> None:
        """Keep rounds 1..`last_round` (what a checkpoint covers), drop later ones."""
        rows = self.read_metrics()
        if len(rows) < last_round:
            raise RunFolderError(
                f"{self.path / METRICS} holds rounds 1..{len(rows)} but the checkpoint covers 1..{last_round}; "
                "the run folder is damaged"
            )
        self._rewrite(METRICS, rows[:last_round])
        self._rewrite(CLIENTS, [row for row in self._client_rows() if row["round"] <= last_round])

    def _client_rows(self) -> list[dict[str, Any]]:
        rows = self._read_lines(CLIENTS)
        odd = next((n for n, row in enumerate(rows, 1) if not _is_ints([row.get("round")])), None)
        if odd is not None:
            raise RunFolderError(f"{self.path / CLIENTS} is damaged: line {odd} has no whole-number round")
        return rows

    def _rewrite(self, name: str, rows: list[dict[str, Any]]) -> None:
        text = "".join(json_text(r) + "\n" for r in rows)
        atomic_write_bytes(self.path / name, text.encode())
