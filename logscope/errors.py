"""Errors that the CLI turns into one clear line and exit code 2."""


class LogscopeError(Exception):
    """The tool could not do what was asked (bad input, bad rule, unwritable output)."""


class InputError(LogscopeError):
    """The input could not be read or holds nothing that looks like a log."""


class RuleError(LogscopeError):
    """A rule file is invalid; the message is ``file:line: reason``."""


class OutputError(LogscopeError):
    """An output could not be written."""
