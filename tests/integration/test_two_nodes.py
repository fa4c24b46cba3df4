"""Two CPU/Gloo nodes x two processes, through `python -m orchestrate run`."""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from orchestrate.hangs.collectives import UNEVEN_HINT

from tests.integration.conftest import containers_under, leftovers

pytestmark = pytest.mark.integration
JOBS = Path(__file__).resolve().parents[1] / "jobs"


def test_hello_sees_world_size_4_with_ranks_on_their_nodes(orchestrate_run, docker_client):
    result = orchestrate_run("--nodes", "2", "--nproc-per-node", "2", "--cpu", "--", "-m", "app.hello")
    assert result.code == 0, result.output
    hellos = re.findall(r"^\[(node\d)/rank(\d)\]\s+hello rank=(\d) .*? world_size=(\d) .*host=(\S+)",
                        result.output, re.M)
    assert sorted(int(h[2]) for h in hellos) == [0, 1, 2, 3]  # every rank exactly once
    for node, prefix_rank, rank, world_size, host in hellos:
        assert prefix_rank == rank and world_size == "4"
        assert node == host == ("node0" if int(rank) < 2 else "node1")
    sums = re.findall(r"all_reduce rank=\d sum=(\S+) expected=10 ok", result.output)
    assert sums == ["10"] * 4
    assert "SUCCEEDED: all 2 nodes exited 0" in result.output
    assert (result.run_dir / "node1.log").read_text().count("hello rank=") == 2
    assert leftovers(docker_client, result.project) == []


def test_toy_ddp_training_leaves_identical_replicas(orchestrate_run, docker_client):
    result = orchestrate_run("--nodes", "2", "--nproc-per-node", "2", "--", "-m", "app.toy",
                             "--steps", "30")
    assert result.code == 0, result.output
    checksums = dict(re.findall(r"param_checksum rank=(\d) value=(\S+)", result.output))
    assert sorted(checksums) == ["0", "1", "2", "3"]
    assert len(set(checksums.values())) == 1, checksums
    assert "step 30/30" in result.output
    summary = result.output.split("summary ===")[1]
    assert re.search(r"^node0\s+0,1\s+succeeded\s+0\s", summary, re.M)
    assert re.search(r"^node1\s+2,3\s+succeeded\s+0\s", summary, re.M)
    assert re.search(r"bring-up [\d.]+ s \| until first output [\d.]+ s \| job [\d.]+ s", summary)
    assert leftovers(docker_client, result.project) == []


def test_a_failing_rank_fails_fast_naming_node_and_rank(orchestrate_run, docker_client):
    started = time.monotonic()
    result = orchestrate_run("--nodes", "2", "--nproc-per-node", "2", "--workdir", str(JOBS),
                             "--", "fail_rank.py", "--fail-rank", "3")
    elapsed = time.monotonic() - started
    assert result.code == 1
    assert "FAILED: node1 rank 3 failed (exit code 1): RuntimeError: injected failure on rank 3" in result.output
    # the worker's structured error file (@record) supplies the traceback
    assert "traceback from the error file of node1/rank3:" in result.output
    assert 'raise RuntimeError(f"injected failure on rank {rank}")' in result.output.split("summary ===")[1]
    # the script's line, from that traceback, under the FAILED line
    assert ('FAILED: node1 rank 3 failed (exit code 1): RuntimeError: injected failure on rank 3\n'
            '  in your code: fail_rank.py:21 in main: raise RuntimeError(f"injected failure on rank {rank}")\n'
            in result.output)
    # The gloo collective timeout defaults to 30 minutes; the run must end long before.
    assert elapsed < 120, f"took {elapsed:.0f} s"
    assert leftovers(docker_client, result.project) == []


def test_a_rank_that_finishes_while_the_others_train_is_named_for_their_lost_peer(orchestrate_run, docker_client):
    result = orchestrate_run("--nodes", "2", "--workdir", str(JOBS), "--", "uneven_batches.py", "--batches", "8",
                             "--short-by", "3")
    assert result.code == 1, result.output[-3000:]
    assert "rank 1 done after 5 batches" in result.output
    failed = next(line for line in result.output.splitlines() if line.startswith("FAILED:"))
    assert failed.startswith("FAILED: node0 rank 0 failed (exit code 1)"), failed
    assert failed.endswith(", as rank 1 (node1, after step 5) had finished its script while rank 0 still ran, and"
                           " rank 0's collectives lost it as a peer (do all ranks run the same number of steps?)"), failed
    # its record says it was in a training step's backward pass: the ranks took different numbers of steps
    assert f"\n  hint: {UNEVEN_HINT}\n" in result.output
    assert leftovers(docker_client, result.project) == []


def test_a_rank_that_aborts_in_native_code_is_named_with_its_cpp_error_and_the_scripts_line(orchestrate_run,
                                                                                            docker_client):
    # gloo aborts on a collective whose sizes differ: no Python traceback, only a C++ exception
    result = orchestrate_run("--nodes", "2", "--workdir", str(JOBS), "--", "size_mismatch.py")
    assert result.code == 1, result.output[-3000:]
    failed = next(line for line in result.output.splitlines() if line.startswith("FAILED:"))
    assert re.match(r"FAILED: node\d rank \d failed \(exit code -6, SIGABRT\): gloo::EnforceNotMet: \[enforce fail at .*"
                    r"Received data size doesn't match expected size", failed), failed
    line = next(i for i, text in enumerate((JOBS / "size_mismatch.py").read_text().splitlines(), 1) if "# SIZES" in text)
    where = re.search(r"^  where it crashed: Aborted in a native thread, while the script was in all_reduce at"
                      rf" size_mismatch.py:{line}; every thread's stack: (\S+)$", result.output, re.M)
    assert where, result.output[-3000:]
    assert "Fatal Python error: Aborted" in Path(where[1]).read_text()
    # its own record died with it: its crash stack places it, its peer's failed collective places the peer
    assert re.search(rf"^  where, by the ranks' collective records: rank 0 aborted in all_reduce at size_mismatch.py:{line};"
                     rf" rank 1 was in all_reduce\(float32\[8\]\) #3 at size_mismatch.py:{line}$", result.output, re.M), \
        result.output[-3000:]
    assert "\n  hint: gloo received more data than expected: the ranks called different collectives" in result.output
    assert leftovers(docker_client, result.project) == []


def test_a_data_loader_worker_that_segfaults_is_found_in_the_datasets_line(orchestrate_run, docker_client):
    # spawned workers (fresh interpreters) here; tests/workers/test_crash_stacks.py forks them
    result = orchestrate_run("--nodes", "2", "--workdir", str(JOBS), "--", "loader_crash.py", "--start", "spawn")
    assert result.code == 1, result.output[-3000:]
    line = next(i for i, text in enumerate((JOBS / "loader_crash.py").read_text().splitlines(), 1) if "# DECODER" in text)
    assert re.search(r"^  where it crashed: Segmentation fault in __getitem__ at"
                     rf" loader_crash.py:{line} \(in a DataLoader worker process\); every thread's stack: ",
                     result.output, re.M), result.output[-3000:]
    assert "\0" not in result.output  # torch's segfault message ends with a NUL byte, left out
    assert leftovers(docker_client, result.project) == []


def test_missing_image_that_may_not_be_built_is_exit_2_and_starts_nothing(orchestrate_run, docker_client, tmp_path):
    result = orchestrate_run("--image", "ddp-compose-no-such-image:0", "--no-build")
    assert result.code == 2
    assert containers_under(docker_client, tmp_path) == []  # other tests' runs may come and go meanwhile


def test_two_runs_at_once_do_not_collide(orchestrate_run, docker_client):
    results = {}

    def go(name: str) -> None:
        results[name] = orchestrate_run("--nodes", "2", "--", "-m", "app.hello")

    threads = [threading.Thread(target=go, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert {n: r.code for n, r in results.items()} == {"a": 0, "b": 0}, [r.output for r in results.values()]
    assert results["a"].project != results["b"].project
    for r in results.values():
        assert len(re.findall(r"all_reduce rank=\d sum=3 expected=3 ok", r.output)) == 2
        assert leftovers(docker_client, r.project) == []


def test_gpus_the_engine_does_not_have_are_refused_before_anything_starts(orchestrate_run, docker_client, tmp_path):
    from orchestrate.engine.gpus import detect_gpus

    if detect_gpus(docker_client).count:
        pytest.skip("this engine has GPUs")
    result = orchestrate_run("--nodes", "2", "--gpus-per-node", "1")
    assert result.code == 2
    assert containers_under(docker_client, tmp_path) == []
