"""A user's class by dotted path (`package.module:Class`): a server strategy, a client rule, an attack.

The one guard every name that becomes code passes. A file never chooses code: a dotted path is
imported only when the command itself names it (its own line, `flwr run`'s run config, or the
server's message to its clients: `name_code`), never because a folder's config.json, a preset
or a forged fingerprint says so; a resume must be given the path again. Code inside a run (or
comparison) folder is never imported either, wherever the module lies (found first, without
running anything), and a current folder inside one is not searched. A module that misbehaves
on import (raises, exits, is a program's `__main__`) is refused in one line.

A study file is a file too: its cells' flags are parsed with `fedpfn run`'s own parser inside
`flags_of_a_file`, so what they name is not the command's. `name_file_code` then names what the
file may choose: the classes and functions of fedpfn and Flower themselves (OWN_PACKAGES, code
that is already installed with fedpfn), and a user's own code only where the user typed
TRUST_FLAG; otherwise one line naming the path, where the file names it, and the flag.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from fedpfn.core.files import enclosing_run_folder, module_locations
from fedpfn.core.hyper import flat_view
from fedpfn.core.settings import ConfigError

_NAMED_BY_COMMAND: set[str] = set()  # the dotted paths this process's command named
_DATA_FOLDERS: set[Path] = set()  # folders this command reads as data, run folder or not by their files
_FROM_A_FILE: list[bool] = []  # not empty while a file's flags are parsed: what they name is not named
OWN_PACKAGES = ("fedpfn", "clients", "strategies", "flwr")  # installed with fedpfn: a file may name their code
TRUST_FLAG = "--trust-code"  # what a user types to let a study file's own code run (fedpfn study run)


T = TypeVar("T")
USER_FAULTS = (Exception, SystemExit, KeyboardInterrupt)  # what a user's code may raise when fedpfn calls it


class UserInterrupt(Exception):
    """A user's code raised KeyboardInterrupt as fedpfn called it: the command stops as at a Ctrl-C,
    one line naming the code, exit 130. Not a ConfigError, so no check lists it among its problems
    and goes on: it reaches the command's own handler at once."""

    exit_code = 130


def user_fault(err: BaseException, line: str) -> Exception:
    """What to raise where a user's code raised `err` (one of USER_FAULTS) as fedpfn called it, `line`
    naming the code and what it raised: ConfigError (exit 2: SystemExit too, never exit 0 unsaid),
    or UserInterrupt for KeyboardInterrupt (exit 130)."""
    return UserInterrupt(line) if isinstance(err, KeyboardInterrupt) else ConfigError(line)


class NoReturn(ConfigError):
    """A user's code that fedpfn called while a run goes on did not return within its bound."""


def within(seconds: float | None, what: str, function: Callable[..., T], *args: Any) -> T:
    """`function(*args)`, a user's code called while a run goes on (a wrapper's hook, a ClientApp
    call around a mod), bounded by `seconds` (None: unbounded): its result, or what it raised,
    re-raised as is; NoReturn naming `what` where it has not returned in time. It runs in a daemon
    thread so that a call that never returns does not hold the process: it ends with the run."""
    if seconds is None:
        return function(*args)
    outcome: list[tuple[bool, Any]] = []

    def call() -> None:
        try:
            outcome.append((True, function(*args)))
        except BaseException as err:  # noqa: BLE001  (SystemExit too: re-raised in the caller's thread)
            outcome.append((False, err))

    thread = threading.Thread(target=call, name="fedpfn-user-code", daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        raise NoReturn(f"{what} did not return within {seconds:g} s (round_timeout)")
    done, value = outcome[0]
    if not done:
        raise value
    return value


def call_user(what: str, seconds: float | None, call: Callable[[], T]) -> T:
    """`call()`, a user's code called mid-run (`what` names it: its setting, path, hook and round),
    `within` `seconds`: what it raises, or a call that has not returned by then, one line naming it
    (ConfigError: exit 2, SystemExit too; UserInterrupt for KeyboardInterrupt: 130)."""
    try:
        return within(seconds, what, call)
    except (ConfigError, UserInterrupt):  # already one line: this bound's, or user code's inside it
        raise
    except USER_FAULTS as err:  # a user's code may raise anything, SystemExit too
        said = f": {err}" if str(err) else ""  # a bare KeyboardInterrupt says nothing more
        raise user_fault(err, f"{what} raised {type(err).__name__}{said}") from None


def keep_out_of_imports(folder: Path) -> None:
    """Never import code from `folder` (a folder being resumed, whatever files it holds)."""
    _DATA_FOLDERS.add(Path(os.path.realpath(folder)))


def _data_folder(path: Path) -> Path | None:
    """The run folder, or folder read as data, that `path` lies in, if any."""
    real = Path(os.path.realpath(path))
    named = next((folder for folder in _DATA_FOLDERS if real == folder or folder in real.parents), None)
    return named or enclosing_run_folder(real)


NAMES_NOT_CODE = ("timm:", "hf:")  # timm:NAME (fedpfn.core.models.TIMM_PREFIX) and hf:NAME name no module


def is_code(value: object) -> bool:
    """Whether a setting's value is a dotted path (`package.module:Name`) rather than a name."""
    return isinstance(value, str) and ":" in value and not value.startswith(NAMES_NOT_CODE)


def code_paths(value: object) -> list[str]:
    """The dotted paths in a setting's value: itself, or each `+`-part of an algorithm."""
    return [part for part in value.split("+") if is_code(part)] if isinstance(value, str) else []


CODE_SETTINGS = ("algorithm", "server", "server_wrap", "client_mod", "model", "dataset", "attack")  # may be code


def code_settings(values: Mapping[str, object]) -> list[object]:
    """The values of CODE_SETTINGS in `values` (keys spelled with '-' or '_', a plug-in's by name or
    namespaced: `plugins.server_wrap`, fedpfn.core.hyper): what `name_code` takes."""
    flat = flat_view({str(key).replace("-", "_"): value for key, value in values.items()})
    return [flat.get(key) for key in CODE_SETTINGS]


def name_code(*values: object) -> None:
    """Record the dotted paths in `values` as named by this process's command (see the module's
    docstring for who may call it): the only ones `import_user_class` imports. Nothing while a
    file's flags are parsed (`flags_of_a_file`)."""
    if _FROM_A_FILE:
        return
    for value in values:
        _NAMED_BY_COMMAND.update(code_paths(value))


@contextmanager
def flags_of_a_file() -> Iterator[None]:
    """Flags a file gives (a study's cells) parsed by a command's own parser: the dotted paths
    they hold are not named by the command, so the guard imports only what `name_file_code` allowed."""
    _FROM_A_FILE.append(True)
    try:
        yield
    finally:
        _FROM_A_FILE.pop()


def is_own(path: str) -> bool:
    """Whether a dotted path names code of fedpfn or Flower themselves (OWN_PACKAGES)."""
    return path.partition(":")[0].split(".")[0] in OWN_PACKAGES


def name_file_code(found: Mapping[str, str], trusted: bool, refusal: str) -> None:
    """Name the dotted paths a file gives (path -> where the file names it): fedpfn's and Flower's
    own always, a user's only where `trusted` (the user typed TRUST_FLAG); ConfigError otherwise,
    naming the first such path, where it is named, and `refusal` (what the user may do)."""
    foreign = [(path, where) for path, where in found.items() if not is_own(path)]
    if foreign and not trusted:
        path, where = foreign[0]
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise ConfigError(f"{where} names code '{path}'{more}, which a file alone never makes fedpfn import; {refusal}")
    _NAMED_BY_COMMAND.update(found)


def import_user_function(path: str, setting: str, noun: str) -> Callable[..., Any]:
    """The function (or other callable) `path` names, under the guard of `import_user_object`."""
    function = import_user_object(path, setting, noun)
    if not callable(function):
        raise ConfigError(f"{setting}: '{path}' is not a function (the module has no callable of that name)")
    return function


def import_user_class(path: str, setting: str, base: type, kind: str, noun: str) -> type:
    """The class `path` names, a subclass of `base`; a module in the current folder is found too.

    ConfigError, one line naming `setting`, where the command did not name it, it does not load
    or is not a `kind` (`noun`: what it is called)."""
    cls = import_user_object(path, setting, noun)
    if not (inspect.isclass(cls) and issubclass(cls, base)):
        raise ConfigError(f"{setting}: '{path}' is not {kind}")
    return cls


def import_user_object(path: str, setting: str, noun: str) -> object:
    """Whatever `path` names (a class, a function), under the same guard as `import_user_class`;
    the caller checks what it is (None: the module has no such name)."""
    module_name, _, class_name = path.partition(":")
    if path not in _NAMED_BY_COMMAND:
        raise ConfigError(
            f"{setting}: '{path}' is code that only a file names (a run folder's config.json or a preset); "
            f"fedpfn imports a user's code only when the command names it: give it again on the command line "
            f"(--{setting.replace('_', '-')} or {setting}=)"
        )
    if "__main__" in module_name.split("."):
        raise ConfigError(f"{setting}: '{module_name}' is a program's entry point, not a module that holds a {noun}")
    if module_name.split(".")[0] in sys.stdlib_module_names:  # `this` prints its poem, `antigravity` opens a browser
        raise ConfigError(
            f"{setting}: '{module_name}' is a module of Python's standard library, which holds no {noun}; "
            "name a module of your own (package.module:Name), not one of the standard library's names"
        )
    if os.getcwd() not in sys.path and _data_folder(Path(os.getcwd())) is None:
        sys.path.append(os.getcwd())
    try:
        locations = module_locations(module_name)
    except (ImportError, ValueError):
        locations = []  # the import below says what is wrong with the name
    inside = next((folder for folder in map(_data_folder, locations) if folder is not None), None)
    if inside is not None:
        raise ConfigError(
            f"{setting}: module '{module_name}' lies in the run folder '{inside}'; fedpfn never imports code "
            f"from a run folder: put the {noun} in a package of your own"
        )
    try:
        module = importlib.import_module(module_name)
    except USER_FAULTS as err:  # a user module may raise anything on import, SystemExit too
        line = f"{setting}: cannot import module '{module_name}' ({type(err).__name__}: {err})"
        raise user_fault(err, line) from None
    return getattr(module, class_name, None)
