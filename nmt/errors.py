"""User-facing errors.

Anything the user can fix (a bad config key, a missing file, a malformed corpus line) is raised as
:class:`NmtError`. The CLI prints it as one line ``error: ...`` on stderr and exits with status 2; every other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations


class NmtError(Exception):
    """An error caused by user input; its message names the file, line or key at fault."""
