"""The one Jinja environment the HTML outputs are rendered with (the report and `logscope diff`): log text is
untrusted, so everything is autoescaped, and a missing value is an error rather than an empty string."""

from __future__ import annotations

from jinja2 import Environment, PackageLoader, StrictUndefined


def html_environment(package: str, *, keep_trailing_newline: bool = False) -> Environment:
    """An environment for the templates in `package`'s templates/ folder."""
    return Environment(
        loader=PackageLoader(package, "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=keep_trailing_newline,
    )
