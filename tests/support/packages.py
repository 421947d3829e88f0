"""The checkout and the packages it ships (pyproject.toml's packages.find), as the house-rule tests read them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fedpfn", "clients", "strategies", "partitions")
