"""Simulated attacks, one file each (clients/attacks/base.py says what an attack is). Each
registers itself (`@attack`); every module here is imported below, so adding an attack is
adding its file. The project's own come first, in the order `--help` and a refusal list them.
"""

from __future__ import annotations

import importlib
import pkgutil

from clients.attacks.base import (
    ATTACKS,
    Attack,
    AttackParams,
    attack,
    attack_class,
    attack_line,
    attack_of,
    attack_problems,
    attack_values,
    malicious_partitions,
    mark_malicious,
)
from clients.attacks.model import ModelAttack

LISTED = ("sign_flip", "scaled", "gaussian", "label_flip")  # the project's own, as the help lists them
for _module in [*LISTED, *sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in LISTED)]:
    importlib.import_module(f"{__name__}.{_module}")

__all__ = [
    "ATTACKS",
    "Attack",
    "AttackParams",
    "ModelAttack",
    "attack",
    "attack_class",
    "attack_line",
    "attack_of",
    "attack_problems",
    "attack_values",
    "malicious_partitions",
    "mark_malicious",
]
