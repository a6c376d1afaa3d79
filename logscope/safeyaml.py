"""YAML for the catalogue and the rule files: safe loaders only, libyaml's when PyYAML was built with it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from logscope import cache

if TYPE_CHECKING:
    import yaml


def fast_loader() -> type[yaml.SafeLoader]:
    """libyaml's safe loader, about ten times faster than the pure-Python one, where PyYAML was built with it.
    PyYAML is imported only here: a run whose parsed texts are all cached (`load_cached`) never imports it."""
    import yaml

    loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return loader


def load(text: str) -> object:
    """One YAML document as plain data (dicts, lists, scalars); never constructs Python objects."""
    loader = fast_loader()(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_cached(text: str) -> object:
    """`load(text)`, read back from the cache when this text was parsed before (the catalogue and the rule files
    are parsed at every start)."""
    return cache.store().value(cache.text_key("yaml", text), lambda: load(text))
