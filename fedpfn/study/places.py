"""Where a study's files may lie: inside the folder `fedpfn study` runs in, reached without a link.

A study file names its runs folder, its page, its stored results and its template, and may name
its page's own readings: a dotted path found from that folder (`code_problem`). Each path is a
relative path without '..' (`place_problem`, as the file is read), so it lies in the folder the
command runs in (the project's own studies: runs/, docs/, studies/); a page and its template end
in `.md` and stored results in `.json`, so a study file cannot have its page overwrite code. Before anything is read or written
there, no part of the path is a symbolic link (`linked`: a link planted at `runs/` or at a
cell's folder would take the writes, or the reads, elsewhere); a file to write is no folder, and
its folder passes the one check every `--out` passes (fedpfn.core.places.out_problem: /dev,
/proc, read-only, no permission); a file to read goes through the checked reader
(fedpfn.core.files.read_limited: a regular file, never a FIFO or a device, bounded). Each
function says the problem as one line without the study's name, for StudyError to carry.
"""

from __future__ import annotations

from pathlib import Path, PurePath

from fedpfn.core.files import DamagedFile, read_limited
from fedpfn.core.places import out_problem

MAX_TEMPLATE_BYTES = 1 << 20  # a page's template: a page of Markdown, as a study file is
MAX_STORED_BYTES = 32 << 20  # a page's stored results (the largest kept today: 0.4 MB)
ACCEPTED = "a path inside the folder fedpfn study runs in (relative, without '..')"


def place_problem(value: str, key: str, suffix: str = "") -> str | None:
    """Why the path `value` that the study's `key` names lies outside its place, or is not a file
    of `suffix` (a page and its template `.md`, stored results `.json`: never code or the study), or None."""
    path = PurePath(value)
    if not value or "\0" in value:
        return f"{key} = {value!r} is not {ACCEPTED}"
    if path.is_absolute() or ".." in path.parts:
        return f"{key} = {value!r} lies outside the folder fedpfn study runs in; give {ACCEPTED}"
    if suffix and path.suffix != suffix:
        return f"{key} = {value!r} is not a {suffix} file; give a path ending in {suffix}"
    return None


def code_problem(value: str | None, key: str) -> str | None:
    """Why `value`, the study's own code (its page's readings), is no dotted path found from the
    folder fedpfn study runs in (`package.module:NAME`, as a user's rule is named), or None."""
    module, colon, name = (value or "").partition(":")
    if value is None or colon and name.isidentifier() and all(part.isidentifier() for part in module.split(".")):
        return None
    return f"{key} = {value!r} is not a dotted path; give package.module:NAME, a module of the study's own"


def linked(path: Path, key: str) -> str | None:
    """The first part of `path` that is a symbolic link, as the problem; None if none is."""
    for part in [*reversed(path.parents[:-1]), path]:
        try:
            if part.is_symlink():
                return f"{key}: '{part}' is a symbolic link, which a study never follows; give a folder of its own"
        except OSError as err:  # a name too long, a folder we may not enter
            return f"{key}: '{part}' cannot be looked at ({err.strerror})"
    return None


def folder_problem(path: Path, key: str, what: str) -> str | None:
    """Why the folder `path` cannot take `what` (no link on the way, then every --out's check)."""
    if (problem := linked(path, key)) is not None:
        return problem
    problem = out_problem(path, what)
    return None if problem is None else f"{key}: {problem.removeprefix('out: ')}"


def file_out_problem(path: Path, key: str, what: str) -> str | None:
    """Why the file `path` cannot be written (a link on the way, a folder there, its folder refused)."""
    if (problem := linked(path, key)) is not None:
        return problem
    if path.exists() and not path.is_file():
        return f"{key}: '{path}' is not a file (a folder, a device or a FIFO); give a file's path"
    return folder_problem(path.parent, key, what)


def read_place(path: Path, key: str, max_bytes: int) -> str:
    """The UTF-8 text of the file at `path`, read by the checked reader; DamagedFile (one line
    naming `key`) for a link on the way, a FIFO, a device, a folder, more than `max_bytes`, or
    bytes that are not UTF-8. FileNotFoundError passes through."""
    if (problem := linked(path, key)) is not None:
        raise DamagedFile(problem)
    try:
        data = read_limited(path, max_bytes)
    except DamagedFile as err:
        raise DamagedFile(f"{key}: {err}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DamagedFile(f"{key}: '{path}' is not UTF-8 text") from None
