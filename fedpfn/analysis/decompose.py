"""Freezing or sharing? A shared-anchor arm's effect split into its two parts.

Shared anchors do two things at once: they freeze a part of the weights, and they freeze the same
part, at the same values, in every model. The control with independent masks freezes as much and
shares nothing, so on the same seeds, seed by seed,

    whole    = shared − plain
    freezing = independent − plain
    sharing  = shared − independent

and whole = freezing + sharing. Each part gets its own paired test and interval. A declared family
(the parts of every endpoint of one setting) is Holm-adjusted together, across metrics, by
`adjust_together` (`fedpfn.analysis.inference`, beside the per-metric `adjust` it serves too). A
part's share of the whole is the ratio of the means, given only where the whole is resolved under
that family (`decided`, after the family's Holm adjustment): a ratio over a difference that may be
0 says nothing, and an interval that excludes 0 before Holm alone is not "resolved" here either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fedpfn.analysis.inference import Paired, decided, paired

PARTS = ("whole", "freezing", "sharing")


@dataclass
class Split:
    """One endpoint's whole effect of shared anchors and its freezing and sharing parts."""

    metric: str
    whole: Paired
    freezing: Paired
    sharing: Paired

    @property
    def parts(self) -> tuple[Paired, Paired, Paired]:
        return self.whole, self.freezing, self.sharing

    def share(self, part: Paired) -> float | None:
        """`part`'s mean as a fraction of the whole's; None where the whole is not resolved under its
        family (its Holm p unset, as before the family is adjusted, reads as not resolved)."""
        return part.mean / self.whole.mean if decided(self.whole) else None

    def share_text(self, part: Paired) -> str:
        """The share as a page prints it: '78 %', or 'not resolved' (the whole, under its family)."""
        share = self.share(part)
        return "not resolved" if share is None else f"{100 * share:.0f} %"


def split(
    label: str, metric: str, plain: Mapping[int, float], independent: Mapping[int, float],
    shared: Mapping[int, float], span: float | None = None,
) -> Split:  # fmt: skip
    """The three paired differences of `metric` on the seeds all three arms have (`label` prefixes each)."""
    seeds = sorted(set(plain) & set(independent) & set(shared))
    on = {name: {s: arm[s] for s in seeds} for name, arm in (("p", plain), ("i", independent), ("s", shared))}
    return Split(
        metric,
        whole=paired(f"{label}: whole (shared − plain)", metric, on["s"], on["p"], span),
        freezing=paired(f"{label}: freezing (independent − plain)", metric, on["i"], on["p"], span),
        sharing=paired(f"{label}: sharing (shared − independent)", metric, on["s"], on["i"], span),
    )
