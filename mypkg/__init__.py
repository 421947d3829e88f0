"""An example of a user's own package (docs/guide/data.md): fedpfn imports it by dotted path from
the folder a command runs in, only because the command names it (fedpfn.core.user_code)."""
