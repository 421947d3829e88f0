"""A user module that raises on import: the refusal names the error (tests/integration/test_cli.py)."""
raise RuntimeError("this module fails on import")
