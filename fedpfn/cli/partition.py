"""Write SuperNodes' own training partitions, so that each node holds only its own data.

By default a deployed SuperNode reads the whole dataset once and keeps its partition in a
cache under its FLWR_HOME (fedpfn/runtime/nodedata.py). A lab that gives each machine only its
share writes partition I of a run's settings into a folder for node I with this script; the
node then gets `--node-config '... partition-dir="FOLDER"'` and reads nothing else. The
partition is the one the simulation trains (same samples, same order), so the deployed run
gives the simulation's numbers; the local test split (`local-test-fraction`) is drawn on the
node, so one export serves any value of it.

  fedpfn partition --config runs/x/config.json --to 0=node-0/part --to 1=node-1/part
  python scripts/export_partition.py --config configs/quickstart.toml --run-config 'seed=1' --to 3=/srv/part-3

The settings that decide a partition (fedpfn.core.cache.SplitKey: dataset, num-clients,
partition, alpha, shards, min size, validation-fraction, seed; and the partition id) are
stored beside the data in partition.json; a node whose run has other settings refuses the
folder with one line saying which differ. Files: partition.json, train_x.npy (float32,
normalised, N x C x H x W), train_y.npy (int64), read memory-mapped by the ClientApp.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpfn.core.files import MAX_JSON_BYTES, PROVENANCE, DamagedFile, read_json
from fedpfn.core.flags import OneLineParser
from fedpfn.core.places import out_problem
from fedpfn.core.settings import ConfigError, read_toml
from fedpfn.core.user_code import code_settings, name_code

if TYPE_CHECKING:  # torch and Flower: imported once the flags are read, so a bad flag is refused first
    from fedpfn.core.config import RunConfig

PAIR = re.compile(r"(\S+?)=('[^']*'|\"[^\"]*\"|\S+)")  # flwr run's KEY=VALUE, as parse_config_args reads it


def config_values(config: Path) -> dict[str, Any]:
    """A run's config.json (its provenance left out: where it ran, not what) or a preset TOML file."""
    if config.suffix != ".json":
        return read_toml(config)
    try:
        values = read_json(config, MAX_JSON_BYTES)
    except (OSError, DamagedFile) as err:
        raise ConfigError(f"--config: cannot read '{config}' as JSON ({err})") from None
    if not isinstance(values, dict):
        raise ConfigError(f"--config: '{config}' is not a run's config.json (not a JSON object)")
    values.pop(PROVENANCE, None)
    if ":" in str(values.get("server", "")):  # a run folder names no code to run; a partition needs no server
        dropped = ("server", "server_args", "strategy.server_args")
        values = {k: v for k, v in values.items() if k not in dropped}
    return values


def pair_values(pairs: list[str]) -> dict[str, Any]:
    """flwr-style K=V pairs; a word that is not K=V is refused (flwr's parser would drop it)."""
    for text in pairs:
        stray = PAIR.sub("", text).split()
        if stray and not (len(pairs) == 1 and text.endswith(".toml")):
            raise ConfigError(f"--run-config: '{stray[0]}' is not KEY=VALUE (e.g. 'num-clients=10 seed=1')")
    from flwr.common.config import parse_config_args  # flwr run's own K=V parser

    try:
        return parse_config_args(pairs)
    except Exception as err:  # noqa: BLE001  (click's exception for a malformed pair, OSError for a file)
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"--run-config: {first}") from None


def run_config(config: Path | None, pairs: list[str]) -> RunConfig:
    """The run's settings: a run's config.json or a preset (TOML), then flwr-style K=V pairs."""
    from fedpfn.runtime.algorithms import load_config

    values = config_values(config) if config is not None else {}
    given = pair_values(pairs)
    name_code(*code_settings(given))  # the command's own; never the file's
    values.update(given)
    return load_config(values)


def target(text: str) -> tuple[int, Path]:
    """`I=FOLDER` -> (I, FOLDER)."""
    index, sep, folder = text.partition("=")
    if not sep or not index.isdigit() or not folder:
        raise argparse.ArgumentTypeError(f"expected PARTITION=FOLDER, got '{text}'")
    return int(index), Path(folder).resolve()


def check_targets(targets: list[tuple[int, Path]], num_clients: int) -> None:
    """Every --to names a partition that exists and a folder (or none yet), each once: checked before any read."""
    for number, (index, folder) in enumerate(targets):
        if not 0 <= index < num_clients:
            raise ConfigError(f"--to: partition {index} does not exist: num-clients is {num_clients}")
        if any(index == other for other, _ in targets[:number]):
            raise ConfigError(f"--to: partition {index} is given twice; export each partition once")
        if any(folder == other for _, other in targets[:number]):
            raise ConfigError(f"--to: {folder} is given twice; give each partition a folder of its own")
        if (problem := out_problem(folder, f"partition {index}")) is not None:  # every output's one check
            raise ConfigError(problem.replace("out:", "--to:", 1))


def main(argv: list[str] | None = None, prog: str = "export_partition.py") -> int:
    """Export the partitions --to names; exit 2 for bad input, 1 for data that cannot be read or written."""
    parser = OneLineParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, help="a run's config.json, or a preset TOML file")
    parser.add_argument("--run-config", action="append", default=[], metavar="'K=V ...'",
                        help="settings as for flwr run --run-config (repeatable; after --config)")  # fmt: skip
    parser.add_argument("--to", type=target, action="append", required=True, metavar="I=FOLDER",
                        help="write partition I into FOLDER (new, empty, or an earlier export; repeatable)")  # fmt: skip
    args = parser.parse_args(argv)
    from fedpfn.core.data import DataError
    from fedpfn.runtime.nodedata import PartitionDataError, write_partition

    try:
        cfg = run_config(args.config, args.run_config)
        check_targets(args.to, cfg.federation.num_clients)
        for partition_id, folder in args.to:
            meta = write_partition(cfg, partition_id, folder)
            print(f"partition {partition_id}: {meta['num_examples']} examples -> {folder}")
    except (ConfigError, DataError, PartitionDataError, OSError) as err:
        written = isinstance(err, OSError) and err.strerror
        text = f"cannot write {err.filename} ({err.strerror})" if written else str(err)
        for line in text.splitlines() or [type(err).__name__]:
            print(f"{prog}: {line}", file=sys.stderr)
        return 2 if isinstance(err, ConfigError) else 1  # bad input exits 2, like run_sim.py
    return 0
