"""`logscope diff` on pairs of real fixture runs: 1 rank vs 2, healthy vs killed, config disagreement."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import typer
from typer.testing import CliRunner

from logscope.compare import diff
from logscope.model import Analysis

REPO = Path(__file__).resolve().parents[2]
REAL_RUNS = REPO / "fixtures" / "real" / "runs"
SINGLE = REAL_RUNS / "20_silent_single_rank_nproc1"
HEALTHY = REAL_RUNS / "01_healthy_ws2"
KILLED = REAL_RUNS / "12_sigkill_rank1"
DISAGREE = REAL_RUNS / "07_config_disagreement_rank1_seed_numenvs"
Analysed = Callable[[Path], Analysis]

COMPUTATION = re.compile(r"Computation: (\d+) steps/s")


def rank0_rates(run: Path) -> list[int]:
    """rank 0's printed steps/s, read straight from its log file (independently of logscope)."""
    (stdout,) = run.glob("logs/*/attempt_0/0/stdout.log")
    return [int(m[1]) for m in COMPUTATION.finditer(stdout.read_text())]


def kinds(analysis: Analysis, rank: int) -> list[str]:
    """The rank's own event kinds (not the launcher's lines about it), in order."""
    rows = analysis.events.filter(
        (pl.col("rank") == rank)
        & pl.col("level").is_in(diff.SEQUENCE_LEVELS)
        & ~pl.col("kind").is_in(list(diff.AGENT_KINDS))
    )
    return rows["kind"].to_list()


def test_one_rank_vs_two_ranks(analysed: Analysed) -> None:
    comparison = diff.diff_runs(analysed(SINGLE), analysed(HEALTHY))
    job = {row["field"]: row for row in comparison["job"]}
    assert (job["world_size"]["a"], job["world_size"]["b"], job["world_size"]["changed"]) == (1, 2, True)
    assert job["torch_version"]["changed"] is False

    config = {row["key"]: row for row in comparison["config"]}
    assert config["world_size"]["changed"] and config["world_size"]["a"] == ["1"] and config["world_size"]["b"] == ["2"]
    for same in ("seed", "num_envs", "task", "config_hash"):
        assert config[same]["changed"] is False, same
    assert {item["rank"] for item in config["seed"]["per_rank"]} == {0, 1}

    rates_a, rates_b = rank0_rates(SINGLE), rank0_rates(HEALTHY)
    tp = comparison["throughput"]
    assert tp["a"]["per_rank"]["0"] == round(sum(rates_a) / len(rates_a), 1)
    assert tp["b"]["per_rank"]["0"] == round(sum(rates_b) / len(rates_b), 1)
    assert tp["a"]["total"] == tp["a"]["per_rank"]["0"] and tp["a"]["estimated"] is False
    assert tp["b"]["total"] == round(sum(rates_b) / len(rates_b) * 2, 1) and tp["b"]["estimated"] is True
    assert tp["a"]["iterations"] == {"0": len(rates_a)}

    checks = {check["id"]: check for check in comparison["checks"]}
    assert checks["V4"]["status"] == "pass"
    assert checks["V1"]["status"] == "pass"
    assert "run A (world size 1)" in checks["V1"]["evidence"][0]

    divergence = {row["rank"]: row for row in comparison["divergence"]}
    assert divergence[1]["status"] == "only in run B"
    assert divergence[0]["status"] == (
        "same" if kinds(analysed(SINGLE), 0) == kinds(analysed(HEALTHY), 0) else "diverges"
    )


def test_healthy_vs_killed_names_the_first_event_where_a_rank_parts(analysed: Analysed) -> None:
    healthy, killed = analysed(HEALTHY), analysed(KILLED)
    comparison = diff.diff_runs(healthy, killed)
    diverging = [row for row in comparison["divergence"] if row["status"] == "diverges"]
    assert diverging, "a rank killed mid-training must part from the healthy run"
    for row in diverging:
        left, right = kinds(healthy, row["rank"]), kinds(killed, row["rank"])
        shared = set(left) & set(right)
        left_shared, right_shared = [k for k in left if k in shared], [k for k in right if k in shared]
        index = row["index"]
        assert left_shared[:index] == right_shared[:index]
        assert index == min(len(left_shared), len(right_shared)) or left_shared[index] != right_shared[index]
        if index < len(left_shared):
            assert row["a"]["kind"] == left_shared[index]
    # Both ranks of the killed run part from the healthy one: rank 0 where its traceback starts (the healthy run
    # goes on iterating), rank 1 where it stops before its end line; torchrun's lines about them are the launcher's.
    by_rank = {row["rank"]: row for row in comparison["divergence"]}
    assert by_rank[0]["status"] == by_rank[1]["status"] == "diverges"
    assert by_rank[0]["b"]["kind"] == "traceback_start" and by_rank[0]["a"]["kind"] == "iteration"
    assert by_rank[1]["b"] is None and by_rank[1]["a"]["kind"] in {"final_checksum", "training_time"}
    assert "exitcode -9" in by_rank[1]["launcher_b"]["text"] and by_rank[1]["launcher_a"] is None


def test_a_launcher_line_first_in_the_file_order_is_not_a_divergence(analysed: Analysed) -> None:
    """Run B's console holds torchrun's failure lines and sorts before the rank files: the comparison still starts
    at what both runs have (issue 19, item 10), so a healthy run compared with itself plus those lines is the same."""
    comparison = diff.diff_runs(analysed(HEALTHY), analysed(KILLED))
    for row in comparison["divergence"]:
        assert row["index"] != 0, f"rank {row['rank']} parts at its first event: {row}"
    same = diff.diff_runs(analysed(HEALTHY), analysed(HEALTHY))
    assert {row["status"] for row in same["divergence"]} == {"same"}
    checks = {check["id"]: check for check in comparison["checks"]}
    assert checks["V4"]["status"] == "unknown"  # same world size: nothing was scaled


def test_config_disagreement_shows_per_rank_values(analysed: Analysed) -> None:
    comparison = diff.diff_runs(analysed(HEALTHY), analysed(DISAGREE))
    changed = {row["key"]: row for row in diff.changed_only(comparison["config"])}
    assert changed, "the run where rank 1 uses another seed and num_envs must differ in configuration"
    events = analysed(DISAGREE).events.filter(pl.col("kind") == "config_values")
    printed = {int(rank): json.loads(fields) for rank, fields in events.select("rank", "fields").iter_rows()}
    for key, row in changed.items():
        for item in row["per_rank"]:
            if key in printed.get(item["rank"], {}):
                assert item["b"] == printed[item["rank"]][key]


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_cli_text_json_and_html(compare_app: typer.Typer, tmp_path: Path) -> None:
    runner = CliRunner()
    text = runner.invoke(compare_app, ["diff", str(SINGLE), str(HEALTHY)])
    assert text.exit_code == 0, text.output
    assert "world_size" in text.output and "V4 Scaling changes throughput: pass" in text.output

    as_json = runner.invoke(compare_app, ["diff", str(SINGLE), str(HEALTHY), "--json"])
    assert as_json.exit_code == 0
    document = json.loads(as_json.output)
    assert document["a"]["world_size"] == 1 and document["b"]["world_size"] == 2

    page = tmp_path / "diff.html"
    result = runner.invoke(compare_app, ["diff", str(SINGLE), str(HEALTHY), "--html", str(page)])
    assert result.exit_code == 0
    html = page.read_text()
    collector = _Collector()
    collector.feed(html)
    assert "script" not in collector.tags and "link" not in collector.tags  # self-contained, no scripts
    assert "V4 Scaling changes throughput: pass" in " ".join("".join(collector.text).split())


def test_html_escapes_what_the_logs_printed(analysed: Analysed) -> None:
    """Config values, event texts and paths are whatever the job printed: on the page they must be text."""
    hostile = "<script>alert(1)</script>"
    comparison = diff.diff_runs(analysed(SINGLE), analysed(HEALTHY))
    comparison["a"]["input"] = hostile
    for row in comparison["config"]:
        row["changed"] = True
        for item in row["per_rank"]:
            item["b"] = hostile
    comparison["nccl_env"] = [{"name": hostile, "a": hostile, "b": None, "changed": True}]
    comparison["divergence"][0].update(
        status="diverges", index=0, a={"kind": hostile, "source": hostile, "line": 1, "text": hostile}, b=None
    )
    html = diff.render_html_page(comparison)
    assert "<script" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 5


def test_cli_exit_2_on_unreadable_runs_and_unwritable_html(compare_app: typer.Typer, tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(compare_app, ["diff", str(HEALTHY), str(tmp_path / "missing")])
    assert missing.exit_code == 2
    assert "missing" in missing.output and "Traceback" not in missing.output
    unwritable = runner.invoke(
        compare_app, ["diff", str(SINGLE), str(HEALTHY), "--html", str(tmp_path / "no" / "d.html")]
    )
    assert unwritable.exit_code == 2
    assert "Traceback" not in unwritable.output


GPU_WS1 = REPO / "fixtures" / "gpu" / "healthy_ws1"
GPU_WS2_SHARED = REPO / "fixtures" / "gpu" / "healthy_ws2_hostid"  # two ranks on the one H200
NCCL_ENV = re.compile(r"NCCL INFO (NCCL_\w+) set by environment to (\S+?)\.?$", re.M)


def test_two_ranks_on_one_gpu_do_not_scale_throughput(analysed: Analysed) -> None:
    """Real H200 runs: world size 1, then 2 ranks sharing the GPU. The total cannot double; V4 says so."""
    comparison = diff.diff_runs(analysed(GPU_WS1), analysed(GPU_WS2_SHARED))
    checks = {check["id"]: check for check in comparison["checks"]}
    assert checks["V4"]["status"] == "fail"
    assert "silently running one rank" in checks["V4"]["evidence"][-1]
    rates_a, rates_b = rank0_rates(GPU_WS1), rank0_rates(GPU_WS2_SHARED)
    tp = comparison["throughput"]
    assert tp["a"]["per_rank"]["0"] == round(sum(rates_a) / len(rates_a), 1)
    assert tp["b"]["per_rank"]["0"] == round(sum(rates_b) / len(rates_b), 1)
    # the NCCL environment each run logged, read straight from rank 0's log
    (log_a,) = GPU_WS1.glob("logs/*/attempt_0/0/stdout.log")
    (log_b,) = GPU_WS2_SHARED.glob("logs/*/attempt_0/0/stdout.log")
    env_a, env_b = dict(NCCL_ENV.findall(log_a.read_text())), dict(NCCL_ENV.findall(log_b.read_text()))
    changed = {row["name"]: (row["a"], row["b"]) for row in diff.changed_only(comparison["nccl_env"])}
    only_b = set(env_b) - set(env_a)
    assert only_b and only_b <= set(changed)
    for name in only_b:
        assert changed[name][0] is None
