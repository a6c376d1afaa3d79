"""Errors that the CLI turns into one clear line and exit code 2."""

import zipfile
import zlib

# What opening or reading a source can raise on a damaged input (a cut gzip stream, a corrupt zip member): a reader
# that only looks at a source's head, or at one dump, skips it on these.
READ_ERRORS = (OSError, EOFError, zipfile.BadZipFile, zlib.error)


class LogscopeError(Exception):
    """The tool could not do what was asked (bad input, bad rule, unwritable output)."""


class InputError(LogscopeError):
    """The input could not be read or holds nothing that looks like a log."""


class RuleError(LogscopeError):
    """A rule file is invalid; the message is ``file:line: reason``."""


class OutputError(LogscopeError):
    """An output could not be written."""
