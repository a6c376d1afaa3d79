"""YAML for the catalogue and the rule files: safe loaders only, libyaml's when PyYAML was built with it."""

from __future__ import annotations

import yaml

# libyaml is about ten times faster than the pure-Python loader: the catalogue and ~30 rule files load at every start.
FAST_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str) -> object:
    """One YAML document as plain data (dicts, lists, scalars); never constructs Python objects."""
    loader = FAST_LOADER(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
