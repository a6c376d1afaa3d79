"""The replayer: re-run a diagnosed collective through torchrun (`logscope replay`).

`load_replay(path)` reads a replay result back, for `analyze --with-replay FILE`; `register(app)` (in
`logscope.replay.command`) adds the command. Nothing here imports torch: only the probe processes do.
"""

from logscope.replay.result import load_replay

__all__ = ["load_replay"]
