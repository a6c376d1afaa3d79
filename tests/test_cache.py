"""The cache of parsed YAML and required literals (logscope/cache.py): read back instead of worked out, never stale,
never in the way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from logscope import cache, safeyaml
from logscope.cache import CACHE_DIR_ENV, Store
from logscope.errors import RuleError
from logscope.events import catalogue as catalogue_module
from logscope.events.literals import required_literals
from logscope.rules import loader
from logscope.rules.loader import BUILTIN_RULES, load_rules

REPO = Path(__file__).resolve().parents[1]
RULE = BUILTIN_RULES / "LS101_collective_timeout.yaml"


@pytest.fixture
def cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache folder of this test's own, with no store of this process open on it yet."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_DIR_ENV, str(folder))
    monkeypatch.setattr(cache, "_stores", {})
    yield folder


def _restart(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the next process sees: this one's entries written out, and a store read afresh from the file."""
    cache.store().save()
    monkeypatch.setattr(cache, "_stores", {})


def _parse_refused(*args: object) -> object:
    raise AssertionError("parsed again although the cache holds this text")


def test_a_rule_pack_read_back_is_not_parsed_again(cache_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = load_rules()
    _restart(monkeypatch)
    monkeypatch.setattr(safeyaml, "load", _parse_refused)
    again = load_rules()
    assert [(r.id, r.match, r.condition, r.message) for r in again] == [
        (r.id, r.match, r.condition, r.message) for r in first
    ]


def test_an_edited_rule_file_is_parsed_again(
    cache_folder: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    mine = rules / "LS901_mine.yaml"
    mine.write_text(RULE.read_text(encoding="utf-8").replace("id: LS101", "id: LS901"), encoding="utf-8")
    assert {r.id for r in load_rules([rules], include_builtin=False)} == {"LS901"}
    _restart(monkeypatch)
    mine.write_text(mine.read_text(encoding="utf-8").replace("id: LS901", "id: LS902"), encoding="utf-8")
    assert {r.id for r in load_rules([rules], include_builtin=False)} == {"LS902"}


def test_a_rule_that_passed_the_schema_is_not_checked_again(
    cache_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_rules()
    _restart(monkeypatch)
    monkeypatch.setattr(loader, "_check", _parse_refused)
    assert [r.id for r in load_rules()] == [r.id for r in first]
    # Another schema or checking code: every rule is checked again.
    monkeypatch.setattr(loader, "_schema_checked", lambda: "schema-checked-edited")
    with pytest.raises(AssertionError, match="parsed again"):
        load_rules()


def test_a_rule_the_schema_refuses_is_refused_every_time(
    cache_folder: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    text = RULE.read_text(encoding="utf-8").replace("id: LS101", "id: LS901")
    (rules / "LS901_mine.yaml").write_text(text.replace("severity: ", "severity: catastrophic #"), encoding="utf-8")
    for _ in range(2):
        with pytest.raises(RuleError, match=r"LS901_mine\.yaml:[0-9]+: .*severity"):
            load_rules([rules], include_builtin=False)
        _restart(monkeypatch)


def test_a_changed_value_comes_back_as_a_fresh_copy(cache_folder: Path) -> None:
    key = cache.text_key("yaml", "a: [1, 2]\n")
    first = cache.store().value(key, lambda: {"a": [1, 2]})
    assert isinstance(first, dict)
    first["a"].append(3)  # a caller changing what it got changes nothing stored
    assert cache.store().value(key, _parse_refused) == {"a": [1, 2]}


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff not json",
        b'["a", "list"]',
        b'{"yaml:00": {"not": "a JSON text"}}',
        b'{"truncated": "',
    ],
    ids=["binary", "not-an-object", "entry-not-text", "half-written"],
)
def test_a_corrupt_cache_is_ignored(cache_folder: Path, content: bytes) -> None:
    cache_folder.mkdir()
    (cache_folder / f"derived-{cache.__version__}.json").write_bytes(content)
    assert {r.id for r in load_rules()} == {p.stem.split("_")[0] for p in BUILTIN_RULES.glob("*.yaml")}


def test_a_corrupt_entry_is_worked_out_again(cache_folder: Path) -> None:
    key = cache.text_key("yaml", "k: v\n")
    cache_folder.mkdir()
    (cache_folder / f"derived-{cache.__version__}.json").write_text(json.dumps({key: "{broken"}), encoding="utf-8")
    assert cache.store().value(key, lambda: safeyaml.load("k: v\n")) == {"k": "v"}


def test_a_folder_that_cannot_be_written_is_left_alone(cache_folder: Path) -> None:
    cache_folder.write_text("a file where the folder would be", encoding="utf-8")
    assert load_rules()
    cache.store().save()  # no error: the next run parses again
    assert cache_folder.read_text(encoding="utf-8") == "a file where the folder would be"


def test_an_empty_setting_turns_the_cache_off(
    cache_folder: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() is None
    assert load_rules()
    cache.store().save()
    assert not any(tmp_path.rglob("derived-*.json"))


def test_the_default_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "logscope"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "logscope"


def test_no_home_means_no_cache_not_a_folder_in_the_cwd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored, as the XDG rule says
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)  # no HOME and no passwd entry: "~" stays "~"
    assert cache.cache_dir() is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "logscope"


def test_what_json_cannot_hold_is_returned_and_not_stored(cache_folder: Path) -> None:
    text = "1: one\n2: two\n"  # YAML's integer keys would come back from JSON as strings
    assert safeyaml.load_cached(text) == {1: "one", 2: "two"}
    cache.store().save()
    assert not (cache_folder / f"derived-{cache.__version__}.json").exists()


def test_literals_are_read_back_under_the_code_that_worked_them_out(
    cache_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pattern = r"NCCL (?:WARN|INFO) Timeout"
    expected = required_literals(pattern)
    assert expected and catalogue_module.cached_literals(pattern) == expected
    _restart(monkeypatch)
    monkeypatch.setattr(catalogue_module, "required_literals", _parse_refused)
    assert catalogue_module.cached_literals(pattern) == expected
    # Other code (literals.py edited): the stored set is not trusted, the set is worked out again.
    monkeypatch.setattr(catalogue_module, "_literals_code", lambda: "edited")
    with pytest.raises(AssertionError, match="parsed again"):
        catalogue_module.cached_literals(pattern)


def test_entries_past_the_limit_keep_those_in_use(cache_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "MAX_ENTRIES", 2)
    store = cache.store()
    for name in ("old-1", "old-2"):
        store.value(name, lambda name=name: name)
    _restart(monkeypatch)
    store = cache.store()
    store.value("new", lambda: "new")
    store.save()
    kept = json.loads((cache_folder / f"derived-{cache.__version__}.json").read_text(encoding="utf-8"))
    assert set(kept) == {"new"}


def test_store_without_a_folder_keeps_nothing() -> None:
    store = Store(None)
    assert store.value("k", lambda: [1]) == [1]
    assert store.value("k", lambda: [2]) == [2]  # not kept: worked out each time


def _child(code: str, folder: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {CACHE_DIR_ENV: str(folder)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip()


def test_a_warm_start_never_imports_pyyaml(tmp_path: Path) -> None:
    """The whole point on a small run: the catalogue, its literals and the rule pack come from the cache, and PyYAML
    (with libyaml, ~20 ms to import) is not loaded at all."""
    code = (
        "import sys\n"
        "from logscope.events.catalogue import catalogue\n"
        "from logscope.rules.loader import load_rules\n"
        "load_rules()\n"
        "[s.literals for s in catalogue().signatures]\n"
        "print('yaml' in sys.modules)\n"
    )
    assert _child(code, tmp_path) == "True"  # cold: parsed, then written at exit
    assert _child(code, tmp_path) == "False"


def test_processes_writing_at_once_leave_a_whole_file(tmp_path: Path) -> None:
    """Several cold starts at once (xdist workers, a fleet scan's tasks) each write the file at exit: each write
    replaces it whole, so the last one stands and the next start reads it."""
    code = "from logscope.rules.loader import load_rules\nload_rules()\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {CACHE_DIR_ENV: str(tmp_path)}
    starts = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env) for _ in range(4)]
    assert [p.wait(timeout=120) for p in starts] == [0, 0, 0, 0]
    assert json.loads((tmp_path / f"derived-{cache.__version__}.json").read_text(encoding="utf-8"))
    assert not list(tmp_path.glob("*.tmp"))  # write_atomic's temporaries
    warm = "import sys\nfrom logscope.rules.loader import load_rules\nload_rules()\nprint('yaml' in sys.modules)\n"
    assert _child(warm, tmp_path) == "False"


def test_an_error_message_compiles_only_the_prefilters_it_may_pass(tmp_path: Path) -> None:
    """`message_kind` asks each signature's literals first: a small run with an exception used to compile all
    ~160 prefilters (~50 ms) to find the two or three that can pass."""
    error = REPO / "fixtures/real/runs/08_allreduce_size_mismatch_rank1/logs/none_o40rws69/attempt_0/1/error.json"
    code = (
        "import json, sys\n"
        "from logscope.events.catalogue import catalogue\n"
        "from logscope.rules.checks.failures import message_kind\n"
        f"text = json.load(open({str(error)!r}))['message']['message']\n"
        "kind = message_kind(text)\n"
        "sigs = catalogue().signatures\n"
        "print(kind, sum('prefilter_re' in s.__dict__ for s in sigs), len(sigs))\n"
    )
    kind, compiled, total = _child(code, tmp_path).split()
    assert kind == "gloo_peer_reset"
    assert int(compiled) <= int(total) // 10
