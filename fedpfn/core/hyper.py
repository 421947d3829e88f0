"""An algorithm's hyperparameters, namespaced by the algorithm that declares them.

A run keeps them as `namespace.name` keys (`fedprox.prox_mu`, `fedpfn.anchor_ratio`) in
config.json, in its train messages and in Flower's run config (which flattens a `[fedprox]`
table to the same keys), so two algorithms, or a user's rule beside a built-in one, may each
declare any name. A name alone (`--prox-mu`, `prox_mu = 0.1` in a preset, a config.json
written before the namespaces) is what users type: it sets that hyperparameter of every part
of the run that declares it, and wins over a namespaced value of the same name. Which
namespaces a run uses is fedpfn.runtime.algorithms' to say; this module knows no algorithm.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any, TypeVar

from fedpfn.core.files import json_text
from fedpfn.core.settings import ConfigError, coerce, field_map

P = TypeVar("P")
SEP = "."
NAMESPACE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")  # what a namespace may be: a TOML bare key, no SEP


def namespace_of(name: str) -> str:
    """An algorithm's namespace: its name with '_' for '-', as keys are spelt (`label_smoothing`)."""
    return name.replace("-", "_")


def key(namespace: str, name: str) -> str:
    return f"{namespace}{SEP}{name}"


def split_key(text: str) -> tuple[str | None, str]:
    """`fedprox.prox_mu` -> ('fedprox', 'prox_mu'); `prox_mu` -> (None, 'prox_mu')."""
    namespace, sep, name = text.partition(SEP)
    return (namespace, name) if sep else (None, text)


def dotted(values: Mapping[str, Any]) -> dict[str, Any]:
    """Tables (a preset's `[fedprox]`, pyproject's as tomllib reads it) as `fedprox.prox_mu` keys."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, Mapping):
            out.update({key(str(name), str(inner)): item for inner, item in value.items()})
        else:
            out[name] = value
    return out


def one_value_each(values: Mapping[str, Any], where: str, declared: Mapping[str, Any] | None = None) -> None:
    """A name alone beside its namespaced key with another value (`prox_mu = 0.1` and `[fedprox]
    prox_mu = 0.2` in one preset): the name alone would win without a word, though which was meant
    cannot be told, so it is refused, naming both (ConfigError, one line each). A key at its
    `declared` value is not given (Flower's run config holds every key at pyproject's value)."""
    flat = dotted(values)
    clashes = [
        f"{name}: {where} sets {name} = {flat[name]!r} and {text} = {value!r}; give one of them "
        f"({name} alone sets it for every part of the run that declares it)"
        for text, value in flat.items()
        if SEP in text and (name := split_key(text)[1]) in flat and flat[name] != value
        and (declared is None or declared.get(text) != value)
    ]
    if clashes:
        raise ConfigError("\n".join(clashes))


def hyper_of(hparams: Mapping[str, Any], namespace: str, cls: type[P]) -> P:
    """The hyperparameters of the part `namespace` declared by `cls`, typed: its namespaced values,
    then the names given alone (which win), each read as `cls` declares it."""
    fields = field_map(cls)
    own: dict[str, Any] = {}
    alone: dict[str, Any] = {}
    for text, value in hparams.items():
        space, name = split_key(text)
        if name in fields and space in (None, namespace):
            (alone if space is None else own)[name] = value
    return cls(**{name: coerce(fields[name], value) for name, value in {**own, **alone}.items()})


def flat_view(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` under the names settings had before the namespaces (`prox_mu`), where one part of the
    run declares the name (else its namespaced keys stay): what a config.json, checkpoint or default
    folder name written before them is compared with, and what a reader of settings by name sees."""
    flat = {name: value for name, value in values.items() if SEP not in name}
    spaced: dict[str, dict[str, Any]] = {}
    for text, value in values.items():
        if SEP in text:
            spaced.setdefault(split_key(text)[1], {})[text] = value
    for name, found in spaced.items():
        if name in flat:  # given alone: it set every part that declares it
            continue
        flat.update({name: next(iter(found.values()))} if len(found) == 1 else found)
    return flat


def changed_settings(
    before: Mapping[str, Any], after: Mapping[str, Any], ignore: Collection[str] = (), absent: Any = None
) -> list[tuple[str, Any, Any]]:
    """(name, before's value, after's value) of every setting that differs, by name: the one comparison
    of a stored run's settings with requested ones (a folder's reuse, a resume, a checkpoint's).
    By flat_view, so a folder written before the namespaces compares; as JSON stores the values (a
    tuple is its list); a name one side lacks stands for `absent`; `ignore`'s names left out."""
    before, after = flat_view(before), flat_view(after)
    names = sorted((set(before) | set(after)) - set(ignore))
    found = [(name, before.get(name, absent), after.get(name, absent)) for name in names]
    return [(name, old, new) for name, old, new in found if json_text(old) != json_text(new)]
