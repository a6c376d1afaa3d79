"""logscope: post-mortem analysis of distributed training logs."""

__version__ = "0.1.0"
