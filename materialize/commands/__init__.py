"""One module per CLI command, each a plain function returning an exit code (pre-commit's habit)."""
