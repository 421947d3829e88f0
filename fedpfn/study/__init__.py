"""A study as one object: arms x seeds x settings declared in one TOML file, run to the end
across kills, read as paired comparisons, written up as a page (`fedpfn study`).

spec (the file, checked) -> cells (one run folder each, `fedpfn run`'s flags) -> runner
(status, run: through fedpfn.runtime.ensure, the one primitive that reuses, resumes or starts
a run) -> page (the page and its stored results; a study's own readings, fedpfn.study.readings).
This layer sits above fedpfn.runtime and fedpfn.analysis; fedpfn.cli.study dispatches to it
and gives it `fedpfn run`'s flag parsing; nothing below imports it.
"""
