"""Alignment: ranks, nodes, attempts, phases and per-rank facts from the event table."""

from logscope.align.align import align
from logscope.align.model import Aligned

__all__ = ["Aligned", "align"]
