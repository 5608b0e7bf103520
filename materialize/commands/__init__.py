"""One module per CLI command, each a plain function returning an exit code (pre-commit's habit)."""

_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7f, 0xa0)] if chr(c) not in "\n\t"}


def printable(text: str) -> str:
    """``text`` with its control characters (but newlines and TABs) spelled ``\\xNN``: a file name or a
    patch line is someone else's, and an escape sequence in it (clear the screen, retitle the terminal,
    OSC 52 to write the clipboard) printed raw would be obeyed by the reader's terminal. git quotes such
    names the same way (``core.quotePath``)."""
    return text.translate(_CONTROLS)
