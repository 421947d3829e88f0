"""Groups of settings where one choice decides which of the others exist.

A group's variants are small frozen dataclasses, each holding only the settings its choice uses
(`Dirichlet` has `alpha`, `Shards` has `shards_per_client`), so a run cannot hold a setting its
choice does not use: what predicates used to say (a setting "used only if" another has some
value) the types say. Users still type the flat flags (`--partition shards --shards-per-client 3`):
`Group.build` makes the variant from them and hands back the ones its choice does not take (the
run refuses those the user gave, one line each), and `Group.flat` writes a variant back as those
flags, the ones it lacks at their defaults, so `config.json` and a run's fingerprint read as
they did before the groups. A variant's fields are named as the flags are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def chooser(type_name: str, declared: dataclasses.Field) -> dataclasses.Field:
    """A chooser's declaration (`setting(...)`) with the type its values parse as ("str", "int", "float")."""
    declared.type = type_name
    return declared


@dataclass(frozen=True)
class Group:
    """The flat settings of one concern and the variants they build.

    `choosers`: the settings that choose the variant, declared with `chooser(type, setting(...))`
    (their check names an unknown choice); each variant says the values it is chosen by in its class
    attribute `chosen_by`. A chooser that is a field of the variant (flwr:NAME's `partition`) is
    matched by that field's check, or by its metadata's `chooses` where the check reads more than
    the choice (a start file). `why`: for each setting some variant lacks, what its refusal says.
    `order`: the flat settings in the order --help lists them.
    """

    name: str
    choosers: Mapping[str, dataclasses.Field]
    variants: tuple[type, ...]
    why: Mapping[str, str]
    order: tuple[str, ...]

    def declarations(self) -> dict[str, dataclasses.Field]:
        """Every flat setting of the group in `order`, each declared once (a chooser as the group
        declares it, the others as the first variant that has them)."""
        found = dict(self.choosers)
        for variant in self.variants:
            for f in dataclasses.fields(variant):
                found.setdefault(f.name, f)
        return {name: found[name] for name in self.order}

    def defaults(self) -> dict[str, Any]:
        return {name: f.default for name, f in self.declarations().items()}

    def choose(self, values: Mapping[str, Any]) -> type | None:
        """The variant the choosers' values name, or None (a chooser's check then says why)."""
        for variant in self.variants:
            fixed = variant.chosen_by
            free = {f.name: f for f in dataclasses.fields(variant) if f.name in self.choosers}
            if all(values[k] == v for k, v in fixed.items()) and all(
                f.metadata.get("chooses", f.metadata["check"])(values[name]) is None for name, f in free.items()
            ):
                return variant
        return None

    def build(self, values: Mapping[str, Any]) -> tuple[Any, list[str], dict[str, Any]]:
        """(the variant of the flat `values`, one line per chooser that names none, the values it does
        not take). `values` may hold only some of the group's settings: the rest are defaults."""
        full = {**self.defaults(), **{k: v for k, v in values.items() if k in self.declarations()}}
        variant = self.choose(full)
        if variant is None:
            lines = [f"{name}: {why}" for name, f in self.choosers.items() if (why := f.metadata["check"](full[name]))]
            return self.variants[0](), lines or [f"{self.name}: no variant for {full}"], {}
        taken = {f.name for f in dataclasses.fields(variant)} | set(variant.chosen_by)
        unused = {name: value for name, value in full.items() if name not in taken}
        return variant(**{k: v for k, v in full.items() if k in taken and k not in variant.chosen_by}), [], unused

    def changed(self, variant: Any, **values: Any) -> Any:
        """The variant these flat `values` make of `variant` (`engine_mode="threads"` of auto: Threads)."""
        return self.build({**self.flat(variant), **values})[0]

    def flat(self, variant: Any) -> dict[str, Any]:
        """The variant as the flat settings users type: its own, its choice, the others at their defaults."""
        return {**self.defaults(), **variant.chosen_by, **dataclasses.asdict(variant)}
