"""What the terminal shows of a run, and the same text appended to the run folder's `run.log`.

A header before any engine starts (what runs, where it writes, on what), a live bar while the
rounds run (rich.progress: the round, the time spent in it, the run's ETA; on a terminal only),
one line per round with an ETA, the warnings of the `fedpfn` logger (client failures, skipped
rounds) and a summary. The terminal gets rich's markup; `run.log` gets the same lines as plain
text from a logging.FileHandler on the `fedpfn` logger, across resumes, so a run folder says
what happened.
"""

from __future__ import annotations

import logging
import os
import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpfn.core.files import ACCURACY_FIGURE

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Task

    from fedpfn.core.config import RunConfig

LOGGER = "fedpfn"
SHOWN = "fedpfn.progress"  # the header, round lines and summary: what the terminal showed, for run.log
logging.getLogger(SHOWN).setLevel(logging.INFO)
logging.getLogger(SHOWN).propagate = False  # its handlers are the run's own: never printed twice


def duration(seconds: float) -> str:
    """45s, 3m12s, 2h05m: short enough for a round line."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def percent(fraction: float, digits: int = 2) -> str:
    """84.43 %: an accuracy as the pages and reports print it (metrics.jsonl keeps the fraction)."""
    return f"{100 * fraction:.{digits}f} %"


def amount(nbytes: float) -> str:
    """812 B, 4.1 kB, 23.5 MB, 1.2 GB: traffic in the unit that fits it (a tiny model's is not "0.0 MB");
    steps of 1000, as the reports' MB (10^6 bytes)."""
    units, power = ("B", "kB", "MB", "GB", "TB"), 0
    while power < len(units) - 1 and round(nbytes / 1000**power, 1) >= 1000:
        power += 1
    value = nbytes / 1000**power
    return f"{value:.0f} B" if power == 0 else f"{value:.1f} {units[power]}"


def start_line(cfg: RunConfig, scores: tuple[str, float, float] | None) -> str:
    """The start file with its sha256, what its classifier became, and round 0's scores (where evaluated)."""
    start = cfg.start  # a Start: the header names one only where the run has one
    head = "classifier from the seed (--fresh-head)" if start.fresh_head else "its classifier taken"
    line = f"  start      {start.init} (sha256 {start.init_sha256}), {head}"
    if scores is not None:
        split, loss, accuracy = scores
        line += f"; round 0: {split} acc {percent(accuracy)}, loss {loss:.4f}"
    return line


def header_lines(
    cfg: RunConfig, first_round: int, resources: str, start: tuple[str, float, float] | None = None
) -> list[str]:
    """The run in a few labelled lines: algorithm, data, federation, rounds, its start file (with
    `start`: round 0's split, loss and accuracy), a wrapper, a mod, an attack, folder, compute."""
    from clients.attacks import attack_line, attack_of
    from fedpfn.core.groups import Dirichlet, Start  # torch: not where a study reads `duration`
    from fedpfn.runtime.plugins import wrapper_line  # a wrapper and its budget, a client mod

    split = f"Dirichlet({cfg.partition.alpha:g})" if isinstance(cfg.partition, Dirichlet) else cfg.partition.method
    resumed = f" (resumed after {first_round - 1})" if first_round > 1 else ""
    rounds = f"{first_round}..{cfg.federation.rounds}{resumed}"
    every = f"evaluated every {cfg.evaluation.eval_every}" if cfg.evaluation.eval_every > 1 else "evaluated every round"
    every += f" and in each of the last {cfg.evaluation.eval_last}" if cfg.evaluation.eval_every > 1 and cfg.evaluation.eval_last > 1 else ""
    held = f", local test {cfg.evaluation.local_test_fraction:g} of each client" if cfg.evaluation.local_test_fraction else ""
    lines = [
        f"[bold]fedpfn[/bold] {cfg.algorithm} on server {cfg.server} · {cfg.task.dataset} {cfg.task.model} "
        f"· seed {cfg.seed}",
        f"  clients    {cfg.federation.num_clients}, {cfg.federation.clients_per_round} a round, {split}{held}",
        f"  rounds     {rounds}, {cfg.local.local_epochs} local epoch(s), {every}",
        *([start_line(cfg, start)] if isinstance(cfg.start, Start) else []),
        *wrapper_line(cfg),
        *attack_line(attack_of(cfg), cfg.federation.num_clients),
        f"  out        {cfg.run_dir}",
        f"  compute    {resources}",
    ]
    tracking = [f"tensorboard {cfg.run_dir / 'tensorboard'}"] if cfg.tracking.tensorboard else []
    if cfg.tracking.wandb:
        mode = os.environ.get("WANDB_MODE", "online")
        tracking.append(f"wandb ({mode})" + (f" {cfg.run_dir / 'wandb'}" if mode == "offline" else ""))
    if tracking:
        lines.append(f"  tracking   {'; '.join(tracking)}")
    return lines


class Progress:
    """Header, live bar, round lines with an ETA, warnings and summary, on the terminal and in run.log."""

    def __init__(
        self, total_rounds: int, log_path: Path | None, show: bool = True, first_round: int = 1
    ) -> None:
        from rich.console import Console  # imported where a run is watched, not in every client

        self.total = total_rounds
        self.log_path = log_path
        self.console = Console(highlight=False, quiet=not show)
        self.errors = Console(highlight=False, stderr=True)
        self.seconds: list[float] = []  # the rounds of this process, for the ETA
        self.bar = _round_bar(self.console, total_rounds, first_round, show)
        self.handlers: list[tuple[str, logging.Handler]] = [(LOGGER, _Warnings(self))]
        if log_path is not None:
            run_log = RunLog(log_path)
            self.handlers += [(LOGGER, run_log), (SHOWN, run_log)]
        for name, handler in self.handlers:
            logging.getLogger(name).addHandler(handler)

    def say(self, markup: str) -> None:
        self.console.print(markup, soft_wrap=True)  # a pipe gets whole lines
        logging.getLogger(SHOWN).info(markup)

    def header(self, lines: list[str]) -> None:
        self.say(f"== {datetime.now().astimezone().isoformat(timespec='seconds')}")
        for line in lines:
            self.say(line)
        self.bar.start()

    def round_done(self, record: dict[str, Any], client_rows: list[dict[str, Any]]) -> None:
        self.seconds.append(record["seconds"])
        split = "val" if "val_accuracy" in record else "test"
        acc, loss = record[f"{split}_accuracy"], record[f"{split}_loss"]
        shown = f"{'-':^7}" if acc is None else percent(acc)  # as wide as 84.43 %
        failed = f" [red]failed {record['num_failures']}[/red]" if record["num_failures"] else ""
        skipped = " [red]skipped[/red]" if record["skipped"] else ""
        before, after = record.get("local_accuracy_before_mean"), record.get("local_accuracy_after_mean")
        local = f"  local {percent(before, 1)} -> {percent(after, 1)}" if before is not None and after is not None else ""
        left = self.total - record["round"]
        eta = duration(sum(self.seconds) / len(self.seconds) * left) if left else ""
        self.say(
            f"round {record['round']:>4}/{self.total}  {split} acc [bold]{shown}[/bold]  "
            f"loss {'   -  ' if loss is None else f'{loss:.4f}'}  train {record['train_loss']:.4f}{local}  "
            f"clients {record['num_clients']}{failed}{skipped}  {record['seconds']:.1f}s"
            + (f"  ETA {eta}" if eta else "")
        )
        self.bar.update(
            self.bar.task_ids[0],
            completed=record["round"],
            since=time.monotonic(),
            eta=f"ETA {eta}" if eta else "",
        )

    def close(self, summary: dict[str, Any] | None = None) -> None:
        self.bar.stop()
        if summary is not None:
            self.summary(summary)
        for name, handler in self.handlers:
            logging.getLogger(name).removeHandler(handler)
            handler.close()

    def summary(self, summary: dict[str, Any]) -> None:
        split = "val" if "final_val_accuracy" in summary else "test"
        last = summary["last5_mean_val_accuracy" if split == "val" else "last5_mean_accuracy"]
        self.say(
            f"[bold]done[/bold] {summary['rounds']} rounds in {duration(summary['wall_seconds'])}: "
            f"final {split} accuracy [bold]{percent(summary[f'final_{split}_accuracy'])}[/bold], "
            f"mean {percent(last)} over the {summary['last5_window']}"
        )
        self.say(
            f"  up {amount(summary['bytes_up_total'])}, down {amount(summary['bytes_down_total'])}, "
            f"failures {summary['num_failures_total']}"
            + (f"; run folder {self.log_path.parent}" if self.log_path is not None else "")
        )
        if summary.get("dp_epsilon") is not None:  # a --server-wrap that adds noise
            budget = f"ε {summary['dp_epsilon']:.4g} at δ {summary['dp_delta']:g}"
            self.say(f"  privacy    {budget}, {summary['dp_accountant']}")
        if self.log_path is not None and not _AS_PART[0]:
            self.say(next_commands(self.log_path.parent, int(summary["rounds"])))


_AS_PART = [False]  # set while a comparison runs its sub-runs: their next steps are the comparison's


@contextmanager
def as_part_of_a_comparison() -> Iterator[None]:
    """Sub-runs close without a `next:` line of their own: the comparison ends with one for its report."""
    _AS_PART[0] = True
    try:
        yield
    finally:
        _AS_PART[0] = False


def next_commands(run_dir: Path, rounds: int) -> str:
    """The closing line: what a user does next with the run folder, ready to paste; more rounds
    means as many again (a fixed +10 would be five times a 2-round run, half of a 20-round one)."""
    from fedpfn.runtime.runfolder import RunFolder

    folder = shlex.quote(str(run_dir))
    return (
        f"  next: fedpfn report {folder} (tables and intervals, written into it) · the figure {shlex.quote(str(run_dir / ACCURACY_FIGURE))}"
        f" · more rounds: {RunFolder(run_dir).resume_command('--rounds', str(2 * rounds))}"
    )


def _round_bar(console: Console, total: int, first_round: int, show: bool) -> Any:
    """rich's live bar for the rounds, shown below the round lines on a terminal only."""
    from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, SpinnerColumn, TextColumn
    from rich.progress import Progress as Bar
    from rich.text import Text

    class RoundClock(ProgressColumn):
        """How long the round under way has run: a round of a big model takes minutes."""

        def render(self, task: Task) -> Text:
            return Text(f"{duration(time.monotonic() - task.fields['since'])} in this round")

    bar = Bar(
        SpinnerColumn(), TextColumn("round"), MofNCompleteColumn(), BarColumn(), RoundClock(),
        TextColumn("[dim]{task.fields[eta]}"),
        console=console, transient=True, refresh_per_second=2, disable=not (show and console.is_terminal),
    )  # fmt: skip
    bar.add_task("rounds", total=total, completed=first_round - 1, since=time.monotonic(), eta="")
    return bar


class RunLog(logging.FileHandler):
    """run.log: the terminal's lines and every warning, as plain text, appended by each process.

    A link planted at its name is refused (OSError), never written through.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path, mode="a", encoding="utf-8", delay=True)
        self.setFormatter(_PlainText())
        self.addFilter(lambda record: record.name == SHOWN or record.levelno >= logging.WARNING)

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        return os.fdopen(fd, "a", encoding=self.encoding)


class _PlainText(logging.Formatter):
    """A record as run.log keeps it: the terminal's line without its markup, or `warning: ...`."""

    def format(self, record: logging.LogRecord) -> str:
        from rich.text import Text

        if record.name == SHOWN:
            return Text.from_markup(record.getMessage()).plain
        return f"{record.levelname.lower()}: {super().format(record)}"


class _Warnings(logging.Handler):
    """The `fedpfn` logger's warnings (client failures, skipped rounds) on stderr, in yellow."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(logging.WARNING)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        from rich.text import Text

        try:
            text = Text(f"warning: {self.format(record)}").markup  # the message is not markup
            self.progress.errors.print(f"[yellow]{text}[/yellow]", soft_wrap=True)
        except Exception:  # noqa: BLE001 - logging must never stop the run
            self.handleError(record)
