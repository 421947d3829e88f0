"""The matchers: ways of finding a permutation that aligns model B's hidden units to model A's.

P (the permutation-attributable loss) is only as good as the permutation that matching finds,
and matchers find different ones, so every figure says which matcher found its permutation:

    full        weight matching (Git Re-Basin Alg. 1) on the full weights
    masked      the same, with the coordinates identical in both models (A == B exactly, such as
                shared anchors) set to 0 in both first, so they reward no permutation: the
                identity does not win for free
    changes     weight matching on the changes from the models' common start (task vectors
                A - w0 and B - w0): the shared start no longer pulls toward the identity. Needs
                w0; models with no common start (own initialisations) are refused
    activation  activation matching (Git Re-Basin Sec. 3.1): per permutation variable, the
                correlation of A's and B's units on held-out inputs, one assignment each

`match` is the one entry point (the analysis's matched pairs and the federation's probe both
call it): a matcher by name, two states, and what that matcher needs; it returns the
permutation with its diagnostics. `refusal` says, without matching, why a matcher cannot run.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from fedpfn.analysis.activations import activation_matching, untapped
from fedpfn.analysis.matching import Perms, StateDict, moved_fraction, permutation_spec, weight_descent
from fedpfn.analysis.permspec import PermutationSpec

MATCHERS = ("full", "masked", "changes", "activation")
FIGURES = ("matched_loss_barrier", "matched_acc_barrier", "permutation_loss", "moved_fraction")
NO_START = "changes: the models have no common start w0 (different initialisations), so they have no changes to match"
MAX_ITER = 100  # weight matching's sweeps before it stops unconverged
NOT_CONVERGED = (
    "weight matching stopped at max_iter sweeps without converging: its permutation is not a local "
    "optimum, and P under it may be too small (the `converged` field is false where it happened)"
)


class MatcherRefused(ValueError):
    """A matcher that cannot run on these models; the message is one line naming the matcher."""


@dataclass(frozen=True)
class Matched:
    """A permutation that matching found (B onto A) and how it was found."""

    matcher: str
    perms: Perms
    moved_fraction: float
    sweeps: int | None = None  # weight matching's full sweeps; None for activation matching
    converged: bool | None = None  # None for activation matching (one assignment, no descent)

    @property
    def warning(self) -> str | None:
        return NOT_CONVERGED if self.converged is False else None

    def diagnostics(self) -> dict[str, Any]:
        """The figures that go beside P: units moved and, for weight matching, its descent."""
        found: dict[str, Any] = {"moved_fraction": self.moved_fraction}
        if self.converged is not None:
            found.update(converged=self.converged, sweeps=self.sweeps)
        if self.warning:
            found["warning"] = self.warning
        return found


def matcher_names(text: str) -> tuple[str, ...]:
    """A comma list of matcher names; MatcherRefused (one line, naming the accepted ones) otherwise."""
    names = tuple(part.strip() for part in text.split(","))
    unknown = [name for name in names if name not in MATCHERS]
    if unknown or not text.strip():
        raise MatcherRefused(f"matchers: unknown {','.join(unknown) or repr(text)}; choose from {', '.join(MATCHERS)}")
    return names


def refusal(
    matcher: str, model: nn.Module, w0: StateDict | None = None, inputs: torch.Tensor | None = None
) -> str | None:
    """Why `matcher` cannot run on `model`'s states with what is given (one line), or None."""
    if matcher not in MATCHERS:
        return f"matcher {matcher!r} is not one of {', '.join(MATCHERS)}"
    try:
        spec = permutation_spec(model)
    except ValueError as err:
        return f"{matcher}: {err}"
    if matcher == "changes" and w0 is None:
        return NO_START
    if matcher == "activation":
        if inputs is None or len(inputs) < 2:
            return "activation: needs held-out inputs (at least 2) to correlate the units' activations on"
        if untapped(spec):
            return f"activation: {type(model).__name__}'s units {', '.join(untapped(spec))} show in no activation"
    return None


def _floats(state: StateDict, other: StateDict, change: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> StateDict:
    """`change(value, other's value)` on every floating tensor; the rest as they are."""
    return {k: change(v, other[k].to(v.device)) if v.is_floating_point() else v for k, v in state.items()}


def _check_start(w0: StateDict, state: StateDict) -> None:
    for key, value in state.items():
        if key not in w0 or w0[key].shape != value.shape:
            raise MatcherRefused(f"changes: the start w0 differs from the models at {key!r} (missing or another shape)")


def _weights(matcher: str, state_a: StateDict, state_b: StateDict, w0: StateDict | None) -> tuple[StateDict, StateDict]:
    """The two states weight matching compares under `matcher`."""
    if matcher == "masked":
        hide = lambda v, other: v.masked_fill(v == other, 0)  # noqa: E731
        return _floats(state_a, state_b, hide), _floats(state_b, state_a, hide)
    if matcher == "changes":
        assert w0 is not None
        _check_start(w0, state_a)
        minus = lambda v, start: v - start  # noqa: E731
        return _floats(state_a, w0, minus), _floats(state_b, w0, minus)
    return state_a, state_b


def match(
    matcher: str, model: nn.Module, state_a: StateDict, state_b: StateDict, *, w0: StateDict | None = None,
    inputs: torch.Tensor | None = None, max_iter: int = MAX_ITER, seed: int = 0,
) -> Matched:  # fmt: skip
    """A permutation of B's units onto A's found by `matcher` (MATCHERS), with its diagnostics.

    `model` is a skeleton of the two states' architecture (its own weights are not used); w0 is
    the models' common start (`changes`), `inputs` held-out inputs on the model's device or any
    (`activation`). MatcherRefused, one line, when the matcher cannot run (`refusal`). Weight
    matching that stops at max_iter unconverged warns once (a RuntimeWarning) and says so in
    `converged`.
    """
    reason = refusal(matcher, model, w0, inputs)
    if reason:
        raise MatcherRefused(reason)
    spec: PermutationSpec = permutation_spec(model)
    if matcher == "activation":
        assert inputs is not None
        perms = activation_matching(spec, model, state_a, state_b, inputs)
        return Matched(matcher, perms, moved_fraction(perms))
    descent = weight_descent(spec, *_weights(matcher, state_a, state_b, w0), max_iter=max_iter, seed=seed)
    found = Matched(matcher, descent.perms, moved_fraction(descent.perms), descent.sweeps, descent.converged)
    if found.warning:
        warnings.warn(found.warning, RuntimeWarning, stacklevel=2)
    return found


def over_pairs(pairs: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Each matcher's figures over pairs: the mean of each figure, converged where every pair
    converged, the most sweeps; omitted (with the first reason) where any pair was."""
    means: dict[str, dict[str, Any]] = {}
    for name in pairs[0]:
        found = [pair[name] for pair in pairs]
        omitted = next((f["omitted"] for f in found if "omitted" in f), None)
        if omitted:
            means[name] = {"omitted": omitted}
            continue
        means[name] = {key: sum(f[key] for f in found) / len(found) for key in FIGURES if all(key in f for f in found)}
        if all("converged" in f for f in found):
            means[name].update(converged=all(f["converged"] for f in found), sweeps=max(f["sweeps"] for f in found))
        warning = next((f["warning"] for f in found if "warning" in f), None)
        if warning:
            means[name]["warning"] = warning
    return means
