"""What the terminal shows of a run, and the same text appended to the run folder's `run.log`.

A header before Ray starts (what runs, where it writes, on what), one line per round with an
ETA, the warnings of the `fedpfn` logger (client failures, skipped rounds) and a summary.
`run.log` keeps all of it as plain text, across resumes, so a run folder says what happened.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from fedpfn.core.config import RunConfig

LOGGER = "fedpfn"


def duration(seconds: float) -> str:
    """45s, 3m12s, 2h05m: short enough for a round line."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def header_lines(cfg: RunConfig, first_round: int, resources: str) -> list[str]:
    """The run in a few labelled lines: algorithm, data, federation, rounds, folder, compute."""
    split = f"Dirichlet({cfg.alpha:g})" if cfg.partition == "dirichlet" else cfg.partition
    resumed = f" (resumed after {first_round - 1})" if first_round > 1 else ""
    start = f"{first_round}..{cfg.rounds}{resumed}"
    every = f"evaluated every {cfg.eval_every}" if cfg.eval_every > 1 else "evaluated every round"
    held = f", local test {cfg.local_test_fraction:g} of each client" if cfg.local_test_fraction else ""
    lines = [
        f"[bold]fedpfn[/bold] {cfg.algorithm} on server {cfg.server} · {cfg.dataset} {cfg.model} "
        f"· seed {cfg.seed}",
        f"  clients    {cfg.num_clients}, {cfg.clients_per_round} a round, {split}{held}",
        f"  rounds     {start}, {cfg.local_epochs} local epoch(s), {every}",
        f"  out        {cfg.run_dir}",
        f"  compute    {resources}",
    ]
    tracking = [f"tensorboard {cfg.run_dir / 'tensorboard'}"] if cfg.tensorboard else []
    if cfg.wandb:
        mode = os.environ.get("WANDB_MODE", "online")
        tracking.append(f"wandb ({mode})" + (f" {cfg.run_dir / 'wandb'}" if mode == "offline" else ""))
    if tracking:
        lines.append(f"  tracking   {'; '.join(tracking)}")
    return lines


class Progress:
    """Header, round lines with an ETA, warnings and summary, on the terminal and in run.log."""

    def __init__(self, total_rounds: int, log_path: Path | None, show: bool = True) -> None:
        from rich.console import Console  # imported where a run is watched, not in every client

        self.total = total_rounds
        self.log_path = log_path
        self.console = Console(highlight=False, quiet=not show)
        self.errors = Console(highlight=False, stderr=True)
        self.seconds: list[float] = []  # the rounds of this process, for the ETA
        self.handler = _Warnings(self)
        logging.getLogger(LOGGER).addHandler(self.handler)

    def say(self, markup: str, console: Console | None = None) -> None:
        from rich.text import Text

        (console or self.console).print(markup, soft_wrap=True)  # a pipe gets whole lines
        if self.log_path is not None:
            with open(self.log_path, "a") as fh:
                fh.write(Text.from_markup(markup).plain + "\n")

    def header(self, lines: list[str]) -> None:
        self.say(f"== {datetime.now().astimezone().isoformat(timespec='seconds')}")
        for line in lines:
            self.say(line)

    def round_done(self, record: dict[str, Any], client_rows: list[dict[str, Any]]) -> None:
        self.seconds.append(record["seconds"])
        split = "val" if "val_accuracy" in record else "test"
        acc, loss = record[f"{split}_accuracy"], record[f"{split}_loss"]
        shown = "   -  " if acc is None else f"{acc:.4f}"
        failed = f" [red]failed {record['num_failures']}[/red]" if record["num_failures"] else ""
        skipped = " [red]skipped[/red]" if record["skipped"] else ""
        before, after = record.get("local_accuracy_before_mean"), record.get("local_accuracy_after_mean")
        local = f"  local {before:.3f}->{after:.3f}" if before is not None and after is not None else ""
        left = self.total - record["round"]
        eta = f"  ETA {duration(sum(self.seconds) / len(self.seconds) * left)}" if left else ""
        self.say(
            f"round {record['round']:>4}/{self.total}  {split} acc [bold]{shown}[/bold]  "
            f"loss {'   -  ' if loss is None else f'{loss:.4f}'}  train {record['train_loss']:.4f}{local}  "
            f"clients {record['num_clients']}{failed}{skipped}  {record['seconds']:.1f}s{eta}"
        )

    def close(self, summary: dict[str, Any] | None = None) -> None:
        logging.getLogger(LOGGER).removeHandler(self.handler)
        if summary is None:
            return
        split = "val" if "final_val_accuracy" in summary else "test"
        last = summary["last5_mean_val_accuracy" if split == "val" else "last5_mean_accuracy"]
        self.say(
            f"[bold]done[/bold] {summary['rounds']} rounds in {duration(summary['wall_seconds'])}: "
            f"final {split} accuracy [bold]{summary[f'final_{split}_accuracy']:.4f}[/bold], "
            f"mean {last:.4f} over the {summary['last5_window']}"
        )
        self.say(
            f"  up {summary['bytes_up_total'] / 1e6:.1f} MB, "
            f"down {summary['bytes_down_total'] / 1e6:.1f} MB, "
            f"failures {summary['num_failures_total']}"
            + (f"; run folder {self.log_path.parent}" if self.log_path is not None else "")
        )


class _Warnings(logging.Handler):
    """The `fedpfn` logger's warnings (client failures, skipped rounds) on stderr and in run.log."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(logging.WARNING)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        from rich.text import Text

        try:
            text = Text(f"warning: {self.format(record)}").markup  # the message is not markup
            self.progress.say(f"[yellow]{text}[/yellow]", self.progress.errors)
        except Exception:  # noqa: BLE001 - logging must never stop the run
            self.handleError(record)
