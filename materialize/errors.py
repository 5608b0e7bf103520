"""User-facing errors and the exit codes scripts can rely on.

Every failure a user can cause (bad YAML, a patch that does not apply, a hash mismatch) is raised as a
``MaterializeError`` subclass; the CLI prints its message without a traceback and exits with
``exit_code``. Anything else is a bug and keeps its traceback.

Exit codes (documented in the README):
  0  success
  1  the work failed: a patch did not apply, ``check`` found fuzz, a gate or test failed
  2  invalid input: malformed series YAML, malformed patch, bad command-line usage
  3  upstream problem: a pin could not be fetched or its hash does not match
  4  refused as unsafe: a path or archive member escapes its root, a link points outside, a device file
  5  busy: another process holds a lock that is not waited for (the bisect state)
  130 interrupted (Ctrl-C); nothing half-written is left behind
  141 the reader of our output went away (a closed pipe), as git exits on SIGPIPE
"""


class MaterializeError(Exception):
    """Base for user-facing errors: the CLI prints the message (no traceback) and exits with exit_code."""

    exit_code = 1


class SeriesError(MaterializeError):
    """The series file is malformed; the message names the file, line and field."""

    exit_code = 2


class PatchFormatError(MaterializeError):
    """A patch file cannot be parsed; the message names the patch file and line."""

    exit_code = 2


class PatchApplyError(MaterializeError):
    """A patch does not apply; the message names the patch, the file and the hunk."""

    exit_code = 1


class UpstreamError(MaterializeError):
    """A pin cannot be resolved, fetched, or does not match its recorded hash."""

    exit_code = 3


class UnsafePathError(MaterializeError):
    """A path would escape its target root; refused before anything is written."""

    exit_code = 4


class BusyError(MaterializeError):
    """Another process holds the lock."""

    exit_code = 5
