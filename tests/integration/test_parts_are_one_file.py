"""A part is one file: a client rule or an attack added to a copy of the packages is one new file,
and a fresh Python process (a subprocess, so that nothing of this one's registries is reused) finds
it through the registry, the config checks and the flags. The other house rules: tests/unit/test_architecture.py.
"""

from __future__ import annotations

from tests.support.packages import PACKAGES, ROOT


RULE = """
from clients.base import FedAvgClient, client_rule


@client_rule
class ThrowawayClient(FedAvgClient):
    name = "throwaway"
"""


def test_a_client_rule_is_one_file(tmp_path):
    """Add a rule to a copy of the packages: one new file, no other file changed, and the copy's
    registry, config checks and flags know it (the count docs/architecture.md promises)."""
    import shutil
    import subprocess
    import sys

    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.py")}
    (tmp_path / "clients" / "throwaway.py").write_text(RULE)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*.py")}
    touched = [p for p in after if before.get(p) != after[p]]
    assert [p.relative_to(tmp_path).as_posix() for p in touched] == ["clients/throwaway.py"]
    probe = (
        "from fedpfn.runtime.algorithms import algorithm_names, load_config, client_rules\n"
        "assert 'throwaway' in algorithm_names()\n"
        "cfg = load_config({'algorithm': 'fedpfn+throwaway'})\n"
        "print([cls.__name__ for cls in client_rules(cfg)])\n"
    )
    shown = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=False,
                           env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-1500:]
    assert shown.stdout.strip() == "['ThrowawayClient', 'FedPFNClient']"


ATTACK = """
import torch

from clients.attacks import ModelAttack, attack


@attack
class ThrowawayAttack(ModelAttack):
    name = "throwaway"

    def sent(self, received, trained, name, per_client):
        return torch.zeros_like(trained)
"""


def test_an_attack_is_one_file(tmp_path):
    """Add an attack to a copy of the packages: one new file, no other file changed, and the copy's
    registry, config checks and client side know it, composed after the rule and the anchors."""
    import shutil
    import subprocess
    import sys

    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.py")}
    (tmp_path / "clients" / "attacks" / "throwaway.py").write_text(ATTACK)
    after = {p: p.read_bytes() for p in tmp_path.rglob("*.py")}
    touched = [p for p in after if before.get(p) != after[p]]
    assert [p.relative_to(tmp_path).as_posix() for p in touched] == ["clients/attacks/throwaway.py"]
    probe = (
        "from fedpfn.core.settings import ConfigError\n"
        "from fedpfn.runtime.algorithms import load_config, client_rules\n"
        "cfg = load_config({'algorithm': 'fedpfn+fedprox', 'attack': 'throwaway'})\n"
        "print([cls.__name__ for cls in client_rules(cfg)], cfg.hparams['attacks.attack'])\n"
        "try:\n    load_config({'attack': 'nope'})\nexcept ConfigError as err:\n    print(err)\n"
    )
    shown = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=False,
                           env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-1500:]
    assert shown.stdout.splitlines() == [
        "['FedProxClient', 'FedPFNClient', 'ThrowawayAttack'] throwaway",
        "attack: unknown 'nope'; use one of none, sign-flip, scaled, gaussian, label-flip, throwaway, "
        "or an attack of your own as package.module:Class",
    ]
