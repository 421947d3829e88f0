"""Planted cells of the alignment gate (studies/alignment_gate): a regime's figures per seed and arm,
without training anything, for the gate's readings and its page's summary."""

from __future__ import annotations

from studies.alignment_gate.readings import KEPT

ARMS = ("plain", "shared-0.4", "independent-0.4", "diff-init")
MOVING = {"plain": [0.1, 0.12, 0.08, 0.11], "shared-0.4": [0.0, 0.01, 0.0, 0.002],
          "independent-0.4": [0.02, 0.03, 0.015, 0.02], "diff-init": [1.1, 1.2, 1.0, 1.15]}  # fmt: skip


def planted(p: dict[str, list[float]], seeds: int = 10) -> dict:
    """A regime whose arm `a` has P = p[a][seed] (other figures 0)."""
    cells = {}
    for seed in range(seeds):
        cells[str(seed)] = {arm: {**dict.fromkeys(KEPT, 0.0), "permutation_loss": p[arm][seed % len(p[arm])]} for arm in ARMS}
    return {"config": {}, "seeds": cells}
