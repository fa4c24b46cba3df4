"""`bench` on real nodes (small sizes): every kind writes its JSON and PNG; a shaped link shows its rate."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from orchestrate.cli.main import main
from tests.integration.conftest import leftovers

pytestmark = pytest.mark.integration
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def bench(tmp_path: Path, *args: str) -> tuple[int, str, Path]:
    out = io.StringIO()
    code = main(["bench", *args, "--runs-dir", str(tmp_path)], out=out)
    text = out.getvalue()
    results = re.search(r"^results: (\S+)$", text, re.M)
    return code, text, Path(results[1]) if results else tmp_path / "missing"


def run_id_of(text: str) -> str:
    return re.search(r"run (\S+): bringing up", text)[1]


def test_bench_collectives_checks_every_result_and_measures_the_wire(docker_client, tmp_path):
    code, text, results = bench(tmp_path, "collectives", "--nodes", "2", "--max-size", "1M", "--min-time", "0.05",
                                "--wire-bytes", "32M")
    assert code == 0, text[-3000:]
    data = json.loads(results.read_text())
    assert {r["op"] for r in data["results"]} == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"}
    assert all(r["ok"] for r in data["results"])
    assert min(r["size"] for r in data["results"] if r["op"] == "all_reduce") == 4
    assert data["wire"]["single_stream_Bps"] > 0 and data["wire"]["pairs"] == 1
    assert data["wire"]["both_ways_Bps"] > 0
    assert results.with_suffix(".png").read_bytes().startswith(PNG_MAGIC)
    report = (results.parent / "report.html").read_text()  # rebuilt with the benchmark in it
    assert 'id="bench-plot"' in report and 'id="bench-table"' in report
    assert leftovers(docker_client, f"ddp-{run_id_of(text)}") == []


@pytest.mark.slow
def test_bench_ddp_compares_every_form_with_identical_replicas(docker_client, tmp_path):
    code, text, results = bench(tmp_path, "ddp", "--node-counts", "2", "--steps", "1", "--buckets", "25",
                                "--image-size", "32", "--batch-size", "2")
    assert code == 0, text[-3000:]
    [run] = json.loads(results.read_text())["runs"]
    assert [f["form"] for f in run["forms"]] == ["local", "ddp-25MB", "ddp-tuned", "ddp-noop", "naive"]
    assert run["parameter_tensors"] == 161 and run["world_size"] == 2
    # every form that synchronises leaves identical replicas; the no-op hook does not synchronise
    assert [f["replicas_identical"] for f in run["forms"]] == [None, True, True, None, True]
    assert {f["regime"] for f in run["forms"]} == {"cpu"}
    [batch] = run["batches"]
    assert batch["speedup_over_naive"] > 0 and "faster than one all_reduce per parameter" in text
    assert "2 nodes (world 2), batch 2 (cpu): DDP's overhead over no DDP ddp-25MB" in text
    assert "goal (<= 3% DDP overhead): not judged" in text
    assert results.with_suffix(".png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.slow
def test_bench_launcher_times_the_launcher_against_a_hand_made_baseline(docker_client, tmp_path):
    code, text, results = bench(tmp_path, "launcher", "--repeats", "1", "--scaling", "1")
    assert code == 0, text[-3000:]
    data = json.loads(results.read_text())
    assert set(data["side_by_side"]) >= {"launcher", "hand-made"}
    assert data["ratio_to_hand_made"] > 0
    assert [row["nodes"] for row in data["scaling"]] == [1]
    assert results.with_suffix(".png").read_bytes().startswith(PNG_MAGIC)
    # the baseline's projects (this bench's own: others may run beside it) are gone
    [project] = data["hand_made_projects"]
    assert project.startswith("ddp-bench-baseline-")
    assert not docker_client.containers.list(all=True, ignore_removed=True, filters={"label": f"com.docker.compose.project={project}"})
    assert not [n.name for n in docker_client.networks.list() if n.name.startswith(project)]


def large_message_busbw(results: Path, op: str) -> float:
    rows = [r for r in json.loads(results.read_text())["results"] if r["op"] == op]
    return max(rows, key=lambda r: r["size"])["busbw_Bps"]


def test_a_shaped_link_carries_its_rate_and_an_unshaped_one_is_unchanged(docker_client, tmp_path):
    args = ("collectives", "--nodes", "2", "--ops", "broadcast", "--min-size", "4M", "--max-size", "16M",
            "--min-time", "0.5", "--wire-bytes", "0")
    code, text, shaped = bench(tmp_path / "shaped", *args, "--link", "rate=1gbit")
    assert code == 0, text[-3000:]
    assert "link shaped: tc qdisc add dev eth0 root tbf rate 1gbit" in text
    rate = large_message_busbw(shaped, "broadcast")
    # the shaper's ceiling holds to 15%; a busy machine only slows a transfer, so below it more slack
    assert 0.7 * 125e6 <= rate <= 1.15 * 125e6, f"shaped broadcast busbw {rate / 1e6:.1f} MB/s"

    code, text, unshaped = bench(tmp_path / "unshaped", *args)
    assert code == 0, text[-3000:]
    assert "link shaped" not in text
    assert large_message_busbw(unshaped, "broadcast") > 2 * 125e6  # the bridge's own speed, far above
