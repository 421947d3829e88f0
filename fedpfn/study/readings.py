"""A study's own readings: what a study file's page may say beyond the generic tables.

The generic page (fedpfn.study.page) writes an arm table, paired families, figures and the
commands from the endpoints a study declares. A study that reads more (its runs' curves, a
control beside each block, another command's results) gives a module of its own beside its
file and names an object of it in `[page] readings = "package.module:NAME"`. That object is a
`Readings`:

    keep(spec)            reads the finished cells and writes what the page needs into page.stored
                          (`fedpfn study page`; `--stored` skips it and reads that file alone)
    sections[KIND](spec)  the lines for the template's `<!-- study: KIND ... -->` marker, read
                          from page.stored (the generic markers need the generic stored results,
                          which a study with readings does not keep)
    whole(spec)           the whole page's text instead of the template with its markers
    partial               True: keep reads the finished cells while others are still to run

A readings module is a user's code, whoever wrote it: `fedpfn study page` imports it only where
the user typed `--trust-code` (fedpfn.core.user_code, the one guard every dotted path passes),
and `status` and `run` never import it. The project's own studies (studies/*/readings.py) are
loaded the same way: they are worked examples of what a user can write, not part of fedpfn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fedpfn.core.user_code import import_user_object
from fedpfn.study.spec import Spec

Section = Callable[[Spec], list[str]]


@dataclass(frozen=True)
class Readings:
    """The hooks a study's readings module gives its page (see the module's docstring)."""

    keep: Callable[[Spec], None]
    sections: Mapping[str, Section] = field(default_factory=dict)
    whole: Callable[[Spec], str] | None = None
    partial: bool = False


def readings_of(spec: Spec) -> Readings | None:
    """The Readings that the study's `page.readings` names (None if it names none), imported under
    the user-code guard; StudyError in one line if it is not a Readings."""
    path = spec.page.readings if spec.page else None
    if path is None:
        return None
    found = import_user_object(path, "page.readings", "study's readings")
    if not isinstance(found, Readings):
        raise spec.refuse(f"page.readings = '{path}' names {type(found).__name__}, not a "
                          "fedpfn.study.readings.Readings (keep, sections, whole, partial)")  # fmt: skip
    return found
