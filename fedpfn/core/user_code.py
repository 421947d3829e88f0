"""A user's class by dotted path (`package.module:Class`): a server strategy or a client rule.

Code inside a run (or comparison) folder is never imported: such a folder holds what a run
wrote, or what someone who could write there put in it, and a class named in an edited
config.json must not run it. Where the module would come from is found first, without running
anything; a current folder inside a run folder is not searched.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from pathlib import Path

from fedpfn.core.files import enclosing_run_folder, module_locations
from fedpfn.core.settings import ConfigError


def import_user_class(path: str, setting: str, base: type, kind: str, noun: str) -> type:
    """The class `path` names, a subclass of `base`; a module in the current folder is found too.

    ConfigError, one line naming `setting`, where it does not load or is not a `kind` (`noun`: what it is called)."""
    module_name, _, class_name = path.partition(":")
    if os.getcwd() not in sys.path and enclosing_run_folder(Path(os.getcwd())) is None:
        sys.path.append(os.getcwd())
    try:
        locations = module_locations(module_name)
    except (ImportError, ValueError):
        locations = []  # the import below says what is wrong with the name
    inside = next((folder for folder in map(enclosing_run_folder, locations) if folder is not None), None)
    if inside is not None:
        raise ConfigError(
            f"{setting}: module '{module_name}' lies in the run folder '{inside}'; fedpfn never imports code "
            f"from a run folder: put the {noun} in a package of your own"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001  (a user module may raise anything on import)
        raise ConfigError(f"{setting}: cannot import module '{module_name}' ({type(err).__name__}: {err})") from None
    cls = getattr(module, class_name, None)
    if not (inspect.isclass(cls) and issubclass(cls, base)):
        raise ConfigError(f"{setting}: '{path}' is not {kind}")
    return cls
