from __future__ import annotations

import io
import json
from collections import deque
from pathlib import Path

import pytest

from orchestrate.outcome.root_cause import (CAUSED_BY, RootCause, chains_on, exception_chain, exception_in_lines,
                                            is_collateral, linked_exceptions, parse_root_cause, users_frame_in)
from orchestrate.supervise.worker_lines import NodeOutput, OutputLine, WorkerLines, parse_line

SAMPLE = (Path(__file__).parent / "data" / "torchrun_failure.txt").read_text().splitlines()


def test_worker_lines_get_the_global_rank_of_their_node(make_job):
    node1 = make_job(nodes=2, nproc_per_node=2).nodes[1]
    line = parse_line(node1, "[default1]:loss 0.5")
    assert (line.node, line.local_rank, line.global_rank, line.text) == ("node1", 1, 3, "loss 0.5")
    assert line.render() == "[node1/rank3] loss 0.5"


def test_torchrun_own_lines_are_labelled_with_the_node_only(make_job):
    node0 = make_job().nodes[0]
    line = parse_line(node0, "W1121 09:15:23 run.py:982] Setting OMP_NUM_THREADS")
    assert line.global_rank is None
    assert line.render() == "[node0] W1121 09:15:23 run.py:982] Setting OMP_NUM_THREADS"


def test_a_local_rank_beyond_the_plan_is_not_attributed(make_job):
    assert parse_line(make_job().nodes[0], "[default5]:x").global_rank is None


def test_root_cause_is_read_from_a_real_torchrun_report():
    cause = parse_root_cause(SAMPLE)
    assert (cause.rank, cause.local_rank, cause.exit_code) == (1, 1, 1)
    assert cause.exception == "RuntimeError: boom on rank 1"
    assert not is_collateral(cause, [])


def test_no_report_means_no_root_cause():
    assert parse_root_cause(["[default0]:all good", "done"]) is None


def test_failures_caused_by_a_dead_peer_are_collateral():
    closed = RootCause(0, 0, 1, "RuntimeError: [pair.cc:561] Connection closed by peer [10.0.0.3]:1")
    signalled = RootCause(2, 0, -15, "")
    assert is_collateral(closed, [])
    assert is_collateral(signalled, [])
    assert is_collateral(RootCause(0, 0, 1, ""), ["... Connection reset by peer"])
    # torch's own check of each collective (--debug-collectives) on a peer that is gone
    assert is_collateral(RootCause(0, 0, 1, "RuntimeError: [Rank 0]: Ranks 1 failed to pass monitoredBarrier in"
                                            " 1800000 ms"), [])
    # gloo could not reach a peer as the process group formed (it was gone, or restarting)
    assert is_collateral(RootCause(0, 0, 1, "RuntimeError: Gloo connectFullMesh failed with [pair.cc:152] timed out"
                                            " connecting: SO_ERROR: Connection refused, remote=[172.26.0.2]:59829"), [])
    assert not is_collateral(RootCause(0, 0, 1, "ConnectionRefusedError: [Errno 111] Connection refused"), [])
    # the script's own error, raised from a peer's closed connection (raise ... from e), is one too
    wrapped = RootCause(0, 0, 1, "RuntimeError: step 5 failed", chain=(
        "caused by: RuntimeError: [pair.cc:561] Connection closed by peer [10.0.0.3]:1",))
    assert is_collateral(wrapped, []) and not is_collateral(RootCause(0, 0, 1, "RuntimeError: step 5 failed"), [])


def test_node_output_keeps_a_log_file_and_per_rank_tails(make_job):
    node = make_job(nodes=1, nproc_per_node=2).nodes[0]
    log = io.StringIO()
    output = NodeOutput(node, log)
    for i, raw in enumerate(["starting", "[default0]:a", "[default1]:b", "[default1]:c"]):
        output.add(raw, at=float(i))
    assert output.first_worker_line_at == 1.0
    assert output.last_lines(rank=1) == ["b", "c"]
    assert output.last_lines() == ["starting", "[default0]:a", "[default1]:b", "[default1]:c"]
    assert log.getvalue().splitlines()[1] == "[node0/rank0] a"


def test_the_local_rank_just_past_the_plan_is_neither_attributed_nor_a_cut(make_job):
    node0 = make_job(nodes=1, nproc_per_node=2).nodes[0]  # local ranks 0 and 1
    assert parse_line(node0, "[default2]:x") == OutputLine("node0", "[default2]:x")
    assert whole_lines(node0, ["[0|0]:a[default2]:b", "[0|0]:c[2|2]:d"]) == [(0, "a[default2]:b"), (0, "c[2|2]:d")]


def test_an_elastic_nodes_line_is_its_local_ranks_and_its_tail_is_kept_by_that_rank(make_job):
    elastic = make_job(nodes=2, rdzv="c10d").nodes[1]  # the rendezvous, not the plan, gives its ranks
    assert parse_line(elastic, "[default0]:loss 0.5") == OutputLine("node1", "loss 0.5", 0)
    output = NodeOutput(elastic, io.StringIO())
    output.add("[default0]:loss 0.5", at=1.0)
    assert output.rank_tails == {0: deque(["loss 0.5"], maxlen=20)} and output.last_lines(rank=0) == ["loss 0.5"]


def test_a_line_in_three_pieces_keeps_every_piece(make_job):
    node0 = make_job(nodes=1, nproc_per_node=2).nodes[0]
    raws = ["[0|0]:a[1|1]:x", "[0|0]:b[1|1]:y", "[0|0]:c"]
    assert whole_lines(node0, raws) == [(1, "x"), (1, "y"), (0, "abc")]


def test_a_ranks_last_lines_keep_its_latest_twenty_a_bars_redraw_replacing_its_last(make_job):
    node0 = make_job(nodes=1, nproc_per_node=1).nodes[0]
    output = NodeOutput(node0, io.StringIO())
    for i in range(25):
        output.add(f"[0|0]:line {i}", at=float(i))
    assert output.last_lines(rank=0, count=30) == [f"line {i}" for i in range(5, 25)]  # LAST_LINES
    assert output.last_lines(rank=0) == [f"line {i}" for i in range(15, 25)]  # 10 unless asked
    for done in (5, 6):
        output.add(f"[0|0]:train:  {done * 10}%|#####     | {done}/10 [00:0{done}<00:05,  1.00it/s]", at=30.0)
    assert output.last_lines(rank=0, count=3) == ["line 23", "line 24",
                                                  "train:  60%|#####     | 6/10 [00:06<00:05,  1.00it/s]"]
    assert output.last_lines(rank=7, count=2) == output.last_lines(count=2)  # a rank with no line: the node's


def whole_lines(node, raws):
    worker_lines = WorkerLines(node)
    lines = [line for raw in raws for line in worker_lines.feed(raw)] + worker_lines.flush()
    return [(line.global_rank, line.text) for line in lines]


def test_a_progress_bar_torchrun_tees_in_pieces_comes_out_one_line_per_redraw(make_job):
    # What torchrun's tee makes of a worker writing "\rstep 1/3", "\rstep 2/3", "\rstep 3/3\n".
    raws = ["[0|0]:", "[0|0]:step 1/3[0|0]:", "[0|0]:step 2/3[0|0]:", "[0|0]:step 3/3[0|0]:"]
    assert whole_lines(make_job().nodes[0], raws) == [(0, ""), (0, "step 1/3"), (0, "step 2/3"), (0, "step 3/3")]


def test_a_line_written_in_pieces_is_joined_across_another_workers_lines(make_job):
    node1 = make_job(nodes=2, nproc_per_node=2).nodes[1]
    raws = ["[2|0]:epoch 1[3|1]:loss 0.5", "[3|1]:loss 0.4", "[2|0]: done", "[default1]:a[default0]:b"]
    assert whole_lines(node1, raws) == [(3, "loss 0.5"), (3, "loss 0.4"), (2, "epoch 1 done"), (2, "b"), (3, "a")]


def test_torchs_own_rank_prefix_is_the_workers_text_not_a_prefix_of_torchrun(make_job):
    """torch writes an uncaught error to stderr as "[rank1]: Traceback ...", and torchrun's tee
    prefixes that: an elastic node's lines are rank 1's (not "local rank 1"'s), and node0's are
    not cut at it."""
    elastic = make_job(nodes=2, rdzv="c10d").nodes[1]
    raws = ["[1|0]:[rank1]: Traceback (most recent call last):", "[1|0]:[rank1]: KeyError: 'momentum'"]
    assert whole_lines(elastic, raws) == [(1, "[rank1]: Traceback (most recent call last):"),
                                          (1, "[rank1]: KeyError: 'momentum'")]
    assert parse_line(elastic, "[rank1]: KeyError: 'momentum'").render() == "[node1] [rank1]: KeyError: 'momentum'"
    node0 = make_job(nodes=2, nproc_per_node=2).nodes[0]
    assert whole_lines(node0, ["[0|0]:[rank0]: ValueError: x", "[1|1]:[rank1]: ValueError: y"]) == [
        (0, "[rank0]: ValueError: x"), (1, "[rank1]: ValueError: y")]
    assert whole_lines(node0, ["[default1]:[rank1]: ValueError: y"]) == [(1, "[rank1]: ValueError: y")]


def test_only_a_prefix_of_this_nodes_workers_cuts_a_line(make_job):
    node0 = make_job(nodes=2, nproc_per_node=2).nodes[0]
    raws = ["[0|0]:see [5|7]: and [default9]:x", "W1121 run.py:982] [0|0]:not a worker's line"]
    assert whole_lines(node0, raws) == [(0, "see [5|7]: and [default9]:x"), (None, raws[1])]


def test_node_output_logs_whole_lines_and_ends_with_the_unfinished_ones(make_job):
    node = make_job(nodes=1, nproc_per_node=2).nodes[0]
    log = io.StringIO()
    output = NodeOutput(node, log)
    assert output.add("[0|0]:half[1|1]:b", at=1.0)[0].text == "b"
    assert [line.text for line in output.add("[0|0]: and half", at=2.0)] == ["half and half"]
    assert output.add("[1|1]:cut[1|1]:", at=3.0)[0].text == "cut"
    output.add("[1|1]:no newline[0|0]:x", at=4.0)
    assert [line.render() for line in output.end(at=5.0)] == ["[node0/rank1] no newline"]
    assert output.last_lines(rank=0) == ["half and half", "x"]
    assert log.getvalue().splitlines() == ["[node0/rank1] b", "[node0/rank0] half and half", "[node0/rank1] cut",
                                           "[node0/rank0] x", "[node0/rank1] no newline"]


def test_a_ranks_own_line_that_it_stopped_in_its_debugger_is_logged_but_not_in_its_last_lines(make_job):
    node = make_job(nodes=1).nodes[0]
    log = io.StringIO()
    output = NodeOutput(node, log)
    stop = ("[ddp-compose] rank 0 stopped in its debugger at t.py:3 in <module>: uncaught ValueError: bad; debug it"
            " with: python -m orchestrate debug r 0")
    for raw in ("[0|0]:Traceback (most recent call last):", '[0|0]:  File "/workspace/t.py", line 3, in <module>',
                "[0|0]:ValueError: bad", f"[0|0]:{stop}"):
        output.add(raw, at=1.0)
    assert output.last_lines(rank=0)[-1] == "ValueError: bad"  # the failure's last line, not a stale stop
    assert output.users_frame(0, "ValueError: bad") == "t.py:3 in <module>"
    assert log.getvalue().splitlines()[-1] == f"[node0/rank0] {stop}"


@pytest.mark.parametrize("lines, exception", [
    # a plain script (no @record, so no error file): Python's own report, under torch's prefix
    (["[rank1]: Traceback (most recent call last):", '[rank1]:   File "train.py", line 12, in <module>',
      '[rank1]:     raise ValueError("my bad batch")', "[rank1]: ValueError: my bad batch"],
     "ValueError: my bad batch"),
    # any exception name, and what torch prints after it left out
    (["Traceback (most recent call last):", '  File "t.py", line 1', "mypkg.Boom",
      "[W1123 05:00:00.000] ProcessGroupGloo.cpp: warning"], "mypkg.Boom"),
    # the traceback's start scrolled out of the tail: a line that names an error
    (['  File "t.py", line 9, in step', "RuntimeError: x happened", "cleanup done"], "RuntimeError: x happened"),
    (["step 1", "all good"], ""),
    # ... never a line shaped as an exception's that names no error (what the script printed)
    (["step 3", "loss: 0.5"], ""),
    # an indented line under the exception's (a hint torch adds) is the message's, not an exception
    (["Traceback (most recent call last):", '  File "t.py", line 3, in <module>', "    model(x)",
      "RuntimeError: Expected to have finished reduction in the prior iteration",
      "    hint: pass find_unused_parameters=True"],
     "RuntimeError: Expected to have finished reduction in the prior iteration"),
    # a traceback indented as a whole (torch's DataLoader left a NUL where "[rank0]:" would go)
    ([" Traceback (most recent call last):", '   File "t.py", line 24, in <module>', "     loss.backward()",
      " RuntimeError: DataLoader worker (pid 17) is killed by signal: Segmentation fault. "],
     "RuntimeError: DataLoader worker (pid 17) is killed by signal: Segmentation fault."),
    # ... and a line after it less indented than it is read whole
    ([" Traceback (most recent call last):", '   File "t.py", line 24, in <module>', "     next(it)", " StopIteration",
      "ValueError: the epoch ran out"], "ValueError: the epoch ran out"),
])
def test_the_exception_a_worker_printed_is_found_in_its_last_lines(lines, exception):
    assert exception_in_lines(lines) == exception


# torch raised it deep in its own code: the script's line is far above the last lines
TORCH_DEEP = ["[rank1]: Traceback (most recent call last):",
              '[rank1]:   File "/workspace/train.py", line 3, in <module>',
              "[rank1]:     main()",
              '[rank1]:   File "/workspace/train.py", line 6, in main',
              "[rank1]:     sampler = DistributedSampler(data)",
              "[rank1]:               ^^^^^^^^^^^^^^^^^^^^^^^^",
              *[f'[rank1]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/x{i}.py", line {i}, in f{i}'
                f"\n[rank1]:     g{i}()" for i in range(12)],
              "[rank1]: ValueError: Default process group has not been initialized"]


@pytest.mark.parametrize("lines, where", [
    ("\n".join(TORCH_DEEP).splitlines(), "train.py:6 in main: sampler = DistributedSampler(data)"),
    # raised in the script itself: its own innermost frame
    (["Traceback (most recent call last):", '  File "/workspace/t.py", line 9, in <module>', '    raise KeyError("x")',
      "KeyError: 'x'"], "t.py:9 in <module>: raise KeyError(\"x\")"),
    # a chained error: the last traceback's frames, not the one it was handling
    (["Traceback (most recent call last):", '  File "/workspace/t.py", line 2, in <module>', "    a()",
      "OSError: no", "", "During handling of the above exception, another exception occurred:", "",
      "Traceback (most recent call last):", '  File "/workspace/t.py", line 4, in <module>', "    b()",
      "RuntimeError: worse"], "t.py:4 in <module>: b()"),
    # a DataLoader worker's traceback quoted in the error: the dataset's line, where it was raised
    (["Traceback (most recent call last):", '  File "/workspace/t.py", line 14, in <module>', "    for b in loader:",
      '  File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1, in __next__',
      "    data = self._next_data()", "KeyError: Caught KeyError in DataLoader worker process 0.",
      "Original Traceback (most recent call last):",
      '  File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", line 52, in fetch',
      "    data = [self.dataset[idx] for idx in possibly_batched_index]",
      '  File "/workspace/t.py", line 10, in __getitem__', "    raise KeyError(i)", "KeyError: 7"],
     "t.py:10 in __getitem__: raise KeyError(i)"),
    # ... and the loop's line where the dataset is a library's
    (["Traceback (most recent call last):", '  File "/workspace/t.py", line 14, in <module>', "    for b in loader:",
      "KeyError: Caught KeyError in DataLoader worker process 0.", "Original Traceback (most recent call last):",
      '  File "/opt/venv/lib/python3.11/site-packages/torchvision/datasets/mnist.py", line 3, in __getitem__',
      "    img = self.data[index]", "KeyError: 7"], "t.py:14 in <module>: for b in loader:"),
    # the workers' hook's wrapper is not the user's code; a frame whose source Python could not read
    (["Traceback (most recent call last):", '  File "/workspace/t.py", line 5, in <module>',
      '  File "/opt/ddp-compose/orchestrate/node/collective_log.py", line 80, in wrapped', "    return call(*a)",
      '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d.py", line 9, in all_reduce',
      "    work = x()", "RuntimeError: boom"], "t.py:5 in <module>"),
    # after a progress bar's unfinished redraw (torchrun's tee joins what came before the "\\r")
    (["[rank0]: epoch 1:  45%|####5     | 45/100 [00:01<00:02]Traceback (most recent call last):",
      '[rank0]:   File "/workspace/t.py", line 7, in <module>', "[rank0]:     for b in tqdm(loader):",
      "[rank0]: RuntimeError: x"], "t.py:7 in <module>: for b in tqdm(loader):"),
    # code Python or torch made is not the user's: a dataclass's generated __init__, an fx graph,
    # inductor's kernels for a compiled model
    (["Traceback (most recent call last):", '  File "/workspace/t.py", line 4, in main',
      "    args = TrainingArguments(fp16=True)", '  File "<string>", line 4, in __init__',
      '  File "/opt/venv/lib/python3.11/site-packages/transformers/training_args.py", line 9, in __post_init__',
      "    raise ValueError(x)", '  File "<eval_with_key>.3", line 5, in forward',
      '  File "/tmp/torchinductor_root/ab/cabxyz.py", line 88, in call', "    buf0 = empty_strided_cuda(s)",
      "ValueError: fp16 needs a GPU"], "t.py:4 in main: args = TrainingArguments(fp16=True)"),
    # a module of the user's package, named from the work directory on as the collective records
    # name it; a file of the user's outside the work directory by its base name
    (["Traceback (most recent call last):", '  File "/workspace/mypkg/train.py", line 14, in main',
      "    for batch in loader:", '  File "/workspace/mypkg/data.py", line 13, in __getitem__',
      '    raise IndexError(f"shard {i} is missing")', "IndexError: shard 13 is missing"],
     'mypkg/data.py:13 in __getitem__: raise IndexError(f"shard {i} is missing")'),
    (["Traceback (most recent call last):", '  File "/data/tools/shards.py", line 3, in load', "    open(p)",
      "FileNotFoundError: p"], "shards.py:3 in load: open(p)"),
    # a module of the user's that Python could not compile: its line, with no function
    (["Traceback (most recent call last):", '  File "/workspace/mypkg/train.py", line 6, in <module>',
      "    from mypkg.model import Net", '  File "/workspace/mypkg/model.py", line 2', "    def forward(self x):",
      "                     ^", "SyntaxError: invalid syntax"], "mypkg/model.py:2: def forward(self x):"),
    # the script itself Python could not compile: no traceback above its error's one frame
    (["step 0", '  File "/workspace/train.py", line 7', "    if rank == 0", "               ^",
      "SyntaxError: expected ':'"], "train.py:7: if rank == 0"),
    # wholly in a library, or no traceback at all
    (["Traceback (most recent call last):", '  File "/usr/lib/python3.11/runpy.py", line 88, in _run_code',
      "    exec(code)", "SystemError: x"], ""),
    (["step 1", "RuntimeError: said, not raised"], ""),
    # the log cut as the worker died printing its traceback: the last line a frame, or its source
    (["Traceback (most recent call last):", '  File "/workspace/t.py", line 8, in <module>', "    main()",
      '  File "/workspace/t.py", line 5, in main'], "t.py:5 in main"),
    (["Traceback (most recent call last):", '  File "/workspace/t.py", line 5, in main', "    step(batch)"],
     "t.py:5 in main: step(batch)"),
    # a recursion's repeats are Python's note, not the frame's source (the source unreadable)
    (["Traceback (most recent call last):", '  File "/workspace/t.py", line 3, in walk',
      "  [Previous line repeated 996 more times]", "RecursionError: maximum recursion depth exceeded"],
     "t.py:3 in walk"),
])
def test_the_users_innermost_frame_is_found_under_torchs_own(lines, where):
    assert users_frame_in(lines) == where


def test_a_worker_keeps_its_latest_traceback_past_its_last_lines_for_that_error_only(make_job):
    node = make_job(nodes=2, nproc_per_node=1).nodes[1]
    output = NodeOutput(node, io.StringIO())

    def printed(*lines: str) -> None:  # by rank 1, through torchrun's tee
        for line in lines:
            output.add(f"[1|0]:{line}", at=1.0)

    printed(*"\n".join(TORCH_DEEP).splitlines())
    assert not any("train.py" in line for line in output.last_lines(1))  # scrolled out of the tail
    error = "ValueError: Default process group has not been initialized"
    assert output.users_frame(1, error) == "train.py:6 in main: sampler = DistributedSampler(data)"
    # a traceback the worker printed and went on from is not a later failure's
    assert output.users_frame(1, "RuntimeError: something else") == ""
    assert output.users_frame(0, error) == ""
    printed("Traceback (most recent call last):", '  File "/workspace/train.py", line 40, in main', "    1 / 0",
            "ZeroDivisionError: division by zero")
    assert output.users_frame(1, "ZeroDivisionError: division by zero") == "train.py:40 in main: 1 / 0"
    assert output.users_frame(1, error) == ""
    # a traceback after a progress bar's unfinished redraw is kept too
    printed("step 3/9Traceback (most recent call last):", '  File "/workspace/train.py", line 50, in main',
            "    step()", "RuntimeError: shape mismatch")
    assert output.users_frame(1, "RuntimeError: shape mismatch") == "train.py:50 in main: step()"
    # what the worker printed long after a traceback it went on from is not kept with it: the same
    # words later, without a traceback of their own, are no failure of that line
    printed("RuntimeError: retrying")
    assert output.users_frame(1, "RuntimeError: retrying") == "train.py:50 in main: step()"  # (its message's lines)
    printed(*(f"step {i}" for i in range(60)), "RuntimeError: out of memory")
    assert output.users_frame(1, "RuntimeError: out of memory") == ""
    assert output.traceback_of(1, "RuntimeError: out of memory") == []  # no traceback of its own


def test_a_traceback_is_the_errors_by_its_first_lines_first_80_characters(make_job):
    output = NodeOutput(make_job(nodes=1, nproc_per_node=1).nodes[0], io.StringIO())
    message = "RuntimeError: " + "x" * 66  # 80 characters
    for line in ("Traceback (most recent call last):", '  File "/workspace/t.py", line 2, in <module>', "    go()",
                 message + "? as the worker printed it"):
        output.add(f"[0|0]:{line}", at=1.0)
    assert output.traceback_of(0, message + "! as the error file has it\nand a second line")[-1] == \
        message + "? as the worker printed it"
    assert output.traceback_of(0, "") == []  # no error said: no traceback is its


def test_a_traceback_keeps_fifty_lines_after_its_last_frame_and_four_hundred_in_all(make_job):
    output = NodeOutput(make_job(nodes=1, nproc_per_node=1).nodes[0], io.StringIO())

    def printed(*lines: str) -> None:
        for line in lines:
            output.add(f"[0|0]:{line}", at=1.0)

    printed("Traceback (most recent call last):", '  File "/workspace/t.py", line 2, in <module>',
            *(f"note {i}" for i in range(1, 51)), "LateError: the 51st line after the frame")
    assert output.traceback_of(0, "note 50")[-1] == "note 50"
    assert output.traceback_of(0, "LateError: the 51st line after the frame") == []  # printed after it went on
    frames = [f'  File "/workspace/t.py", line {i}, in f' for i in range(399)]
    printed("Traceback (most recent call last):", *frames, "Boom: the 401st line")
    assert len(output.traceback_of(0, "Traceback")) == 400 and output.traceback_of(0, "Boom: the 401st line") == []


# A DataLoader whose worker process was killed: torch raises its own error from the one that says why.
KILLED_LOADER_WORKER = [
    "[rank3]: Traceback (most recent call last):",
    '[rank3]:   File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1275, in _try_get_data',
    "[rank3]:     data = self._data_queue.get(timeout=timeout)",
    '[rank3]:   File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/_utils/signal_handling.py", line 73, in handler',
    "[rank3]:     _error_if_any_worker_fails()",
    "[rank3]: RuntimeError: DataLoader worker (pid 43) is killed by signal: Killed. ",
    "[rank3]: ",
    "[rank3]: The above exception was the direct cause of the following exception:",
    "[rank3]: ",
    "[rank3]: Traceback (most recent call last):",
    '[rank3]:   File "/workspace/loader.py", line 18, in <module>',
    "[rank3]:     for x in dl:",
    '[rank3]:   File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1288, in _try_get_data',
    "[rank3]:     raise RuntimeError(",
    "[rank3]: RuntimeError: DataLoader worker (pid(s) 43) exited unexpectedly",
]


@pytest.mark.parametrize("lines, chain", [
    (KILLED_LOADER_WORKER, ("caused by: RuntimeError: DataLoader worker (pid 43) is killed by signal: Killed.",)),
    # an error raised in an except block: Python's implicit context, said as such
    (["Traceback (most recent call last):", '  File "/workspace/cfg.py", line 4, in <module>', '    steps = cfg["steps"]',
      "KeyError: 'steps'", "", "During handling of the above exception, another exception occurred:", "",
      "Traceback (most recent call last):", '  File "/workspace/cfg.py", line 6, in <module>', "    steps = int(None)",
      "TypeError: int() argument must be a string"], ("raised while handling: KeyError: 'steps'",)),
    # three deep, nearest first
    (["Traceback (most recent call last):", "  x", "OSError: disk", "",
      "The above exception was the direct cause of the following exception:", "",
      "Traceback (most recent call last):", "  y", "ValueError: bad shard", "",
      "During handling of the above exception, another exception occurred:", "",
      "Traceback (most recent call last):", "  z", "RuntimeError: gave up"],
     ("raised while handling: ValueError: bad shard", "caused by: OSError: disk")),
    # a cause with no traceback of its own, after lines the script printed: its class's name tells it
    (["loss: 0.5", "StopIteration", "", "During handling of the above exception, another exception occurred:", "",
      "Traceback (most recent call last):", "  x", "RuntimeError: gave up"], ("raised while handling: StopIteration",)),
    # a save cut short by a full disk, its clean-up meeting the full disk again: the same error,
    # said as such, and a link to another error after it said in full
    (["Traceback (most recent call last):", "  x", "OSError: [Errno 28] No space left on device: 'ckpt/a.pt'", "",
      "During handling of the above exception, another exception occurred:", "",
      "Traceback (most recent call last):", "  y", "OSError: [Errno 28] No space left on device: 'ckpt/a.pt'"],
     ("raised while handling the same error",)),
    (["Traceback (most recent call last):", "  w", "KeyError: 'a'", "",
      "During handling of the above exception, another exception occurred:", "",
      "Traceback (most recent call last):", "  x", "OSError: full", "",
      "During handling of the above exception, another exception occurred:", "",
      "Traceback (most recent call last):", "  y", "OSError: full"],
     ("raised while handling the same error", "raised while handling: KeyError: 'a'")),
    # raised alone, or a DataLoader worker's traceback quoted in its error: no chain
    (KILLED_LOADER_WORKER[9:], ()),
    (["Traceback (most recent call last):", "  x", "ValueError: Caught ValueError in DataLoader worker process 0.",
      "Original Traceback (most recent call last):", "  y", "ValueError: bad item"], ()),
])
def test_the_exceptions_an_error_was_raised_from_are_said_nearest_first(lines, chain):
    assert exception_chain(lines) == chain


def test_a_traceback_chains_on_only_where_its_last_words_say_so():
    assert chains_on(KILLED_LOADER_WORKER[:9])  # (torch's "[rank3]: " on the blank line after the marker)
    assert not chains_on(KILLED_LOADER_WORKER[:6]) and not chains_on([])


def test_a_worker_keeps_the_tracebacks_its_error_was_chained_from_and_only_those(make_job):
    node = make_job(nodes=2, nproc_per_node=2).nodes[1]
    output = NodeOutput(node, io.StringIO())
    for line in KILLED_LOADER_WORKER:
        output.add(f"[3|1]:{line}", at=1.0)
    error = "RuntimeError: DataLoader worker (pid(s) 43) exited unexpectedly"
    assert output.exception_chain(3, error) == (
        "caused by: RuntimeError: DataLoader worker (pid 43) is killed by signal: Killed.",)
    assert output.users_frame(3, error) == "loader.py:18 in <module>: for x in dl:"
    assert output.exception_chain(3, "RuntimeError: another") == ()  # not the traceback of that error
    # a later traceback that follows no marker begins afresh: the old chain is not its own
    for line in ("Traceback (most recent call last):", '  File "/workspace/loader.py", line 30, in <module>',
                 "ValueError: bad"):
        output.add(f"[3|1]:{line}", at=2.0)
    assert output.exception_chain(3, "ValueError: bad") == ()


def test_a_long_chained_traceback_keeps_its_last_tracebacks_own_lines_and_a_cause_without_a_traceback(make_job):
    node = make_job(nodes=1, nproc_per_node=1).nodes[0]
    output = NodeOutput(node, io.StringIO())

    def printed(*lines: str) -> None:
        for line in lines:
            output.add(f"[0|0]:[rank0]: {line}", at=1.0)

    torch_frames = [line for i in range(150) for line in (f'  File "/opt/venv/lib/python3.11/site-packages/torch/m{i}.py",'
                                                          f" line {i}, in f{i}", f"    g{i}()")]
    # a cause of 150 lines, then the error raised from it, 300 lines deep: each keeps its own lines
    printed("Traceback (most recent call last):", *torch_frames[:148], "OSError: short read", "",
            "The above exception was the direct cause of the following exception:", "",
            "Traceback (most recent call last):", '  File "/workspace/train.py", line 9, in main', "    step()",
            *torch_frames, "RuntimeError: backend failed", "Note: set TORCH_LOGS for more")
    assert output.users_frame(0, "RuntimeError: backend failed") == "train.py:9 in main: step()"
    assert output.exception_chain(0, "RuntimeError: backend failed") == ("caused by: OSError: short read",)
    # an exception raised from one that was never raised: Python prints the cause with no traceback
    output = NodeOutput(node, io.StringIO())
    printed("retrying", "ValueError: bad shard 7", "Note: shard 7 of 9", "", "The above exception was the direct cause of the following exception:", "",
            "Traceback (most recent call last):", '  File "/workspace/train.py", line 12, in main',
            "RuntimeError: cannot load")
    assert output.exception_chain(0, "RuntimeError: cannot load") == ("caused by: ValueError: bad shard 7",)


def test_a_chained_traceback_keeps_the_last_200_lines_of_those_before_it_and_fifty_after_its_chain_line(make_job):
    node = make_job(nodes=1, nproc_per_node=1).nodes[0]

    def printed(output: NodeOutput, *lines: str) -> None:
        for line in lines:
            output.add(f"[0|0]:{line}", at=1.0)

    chain = "The above exception was the direct cause of the following exception:"
    frames = [line for i in range(149) for line in (f'  File "/opt/lib/m{i}.py", line {i}, in f{i}', f"    g{i}()")]
    cause = ["Traceback (most recent call last):", *frames, "OSError: short read", "", chain, ""]  # 303 lines
    output = NodeOutput(node, io.StringIO())
    printed(output, *cause, "Traceback (most recent call last):", '  File "/workspace/t.py", line 9, in main',
            "    step()", "RuntimeError: backend failed")
    kept = output.traceback_of(0, "RuntimeError: backend failed")
    assert kept[:200] == cause[-200:] and len(kept) == 204  # half of TRACEBACK_LINES of the cause, then its own
    # a cause printed without a traceback: the lines before the chain line, then 50 after it
    output = NodeOutput(node, io.StringIO())
    printed(output, "retrying", "ValueError: bad shard 7", "", chain, *(f"note {i}" for i in range(1, 52)))
    assert output.traceback_of(0, "note 50")[:5] == ["retrying", "ValueError: bad shard 7", "", chain, "note 1"]
    assert output.traceback_of(0, "note 50")[-1] == "note 50" and output.traceback_of(0, "note 51") == []
    # a traceback's first line, then lines that are no frame: 50 of them
    output = NodeOutput(node, io.StringIO())
    printed(output, "Traceback (most recent call last):", *(f"line {i}" for i in range(1, 52)))
    assert output.traceback_of(0, "line 50")[-1] == "line 50" and output.traceback_of(0, "line 51") == []


def test_a_cause_whose_message_has_several_lines_is_said_by_its_first():
    assert exception_chain(["Traceback (most recent call last):", '  File "/workspace/a.py", line 3, in f',
                            "    raise KeyError(k)", "    ^^^^^^^^^^^^^^^^^", "ValueError: bad batch 7",
                            "KeyError: 'label' is what the loader said", "", "During handling of the above exception, another exception"
                            " occurred:", "", "Traceback (most recent call last):", "  y", "RuntimeError: gave up"]) == (
        "raised while handling: ValueError: bad batch 7",)


@pytest.mark.parametrize("text, raised", [
    (['  File "t.py", line 3, in <module>', "    f()", "ValueError: bad", "", ""], "ValueError: bad"),
    (['  File "t.py", line 3, in <module>', "    raise StopIteration", "StopIteration"], "StopIteration"),
    (['  File "t.py", line 3, in <module>', "    f()", "RuntimeError: bad", "Note: a line of its message"],
     "RuntimeError: bad"),
    # neither an error's name nor a class's: the first line shaped as an exception's
    (['  File "t.py", line 3, in <module>', "    f()", "custom.failure: went wrong", "see: above"],
     "custom.failure: went wrong"),
    (["OSError: x", "Traceback (most recent call last):", "KeyError: 'x'"], "KeyError: 'x'"),  # no frame: its start
    (["OSError: printed", "", "ValueError: y"], "ValueError: y"),  # raised with no traceback: up to the blank line
    (["", ""], ""),
    ([], ""),
])
def test_the_exception_above_a_chain_line_is_its_error_else_its_class_else_its_first_line(text, raised):
    """What Python prints above "The above exception was the direct cause of ...": the lines from
    the last frame's source (or the traceback's start, or a blank line) to the blank line above it."""
    from orchestrate.outcome.root_cause import raised_above

    assert raised_above(["Traceback (most recent call last):", *text]) == raised


def test_the_hooks_frames_leave_a_traceback_unless_the_hooks_own_code_raised():
    """The collective recorder's wrapper stands between the script's call and torch's: its frame
    (the ``File`` line and the lines under it) goes, also where the wrapped call raised from C
    (``original(...)`` the innermost line); where the hook's own code raised, its frames are the
    story and the traceback is kept whole."""
    from orchestrate.hangs.crash_dump import HOOK_DIRS
    from orchestrate.outcome.root_cause import without_hook_frames

    start = ["Traceback (most recent call last):"]
    script = ['  File "/workspace/train.py", line 12, in <module>', "    step()",
              '  File "/workspace/train.py", line 9, in step', "    dist.all_reduce(t)"]
    wrapper = [f'  File "{HOOK_DIRS[0]}collective_log.py", line 40, in wrapper', "    return original(*args, **kwargs)",
               "           ^^^^^^^^^^^^^^^^^^^^^^^^^"]
    torchs = ['  File "/opt/venv/torch/distributed/distributed_c10d.py", line 2000, in all_reduce',
              "    work = group.allreduce([tensor], opts)"]
    through = "\n".join(start + script + wrapper + torchs + ["RuntimeError: boom"]) + "\n"
    assert without_hook_frames(through) == "\n".join(start + script + torchs + ["RuntimeError: boom"]) + "\n"
    from_c = "\n".join(start + script + wrapper + ["FileNotFoundError: [Errno 2] No such file: 'x'"])
    assert without_hook_frames(from_c) == "\n".join(start + script + ["FileNotFoundError: [Errno 2] No such file: 'x'"])
    own = "\n".join(start + script + [wrapper[0], "    record(entry)", "KeyError: 'seq'"])
    assert without_hook_frames(own) == own
    cut = "\n".join(start + script + [wrapper[0]])  # the hook's frame last, with no line under it: its own
    assert without_hook_frames(cut) == cut
    assert without_hook_frames("") == ""
    # a disk-full fault's ENOSPC (an error file of @record): the system's, as the worker's own traceback has it
    full = [f'  File "{HOOK_DIRS[0]}storage_faults.py", line 151, in write', "    raise full"]
    enospc = "OSError: [Errno 28] No space left on device: 'ckpt.pt'"
    assert without_hook_frames("\n".join(start + script + full + [enospc])) == "\n".join(start + script + [enospc])
    assert without_hook_frames("\n".join(start + script + full + ["KeyError: 'key'"])) == "\n".join(
        start + script + full + ["KeyError: 'key'"])  # the shim's own error: its frames stay


def test_an_error_file_gives_its_message_traceback_and_time_or_a_plain_message():
    cause = RootCause(1, 1, 1, "from the log")
    cause.add_error_file(json.dumps({"message": {"message": "ValueError: bad", "extraInfo": {"timestamp": "7"}}}))
    assert (cause.exception, cause.traceback, cause.timestamp) == ("ValueError: bad", "", 7.0)
    cause.add_error_file(json.dumps({"message": "Signal 9 (SIGKILL) received by PID 4"}))  # torch's, for a signal
    assert cause.exception == "Signal 9 (SIGKILL) received by PID 4"
    cause.add_error_file("not json")
    assert cause.exception == "Signal 9 (SIGKILL) received by PID 4"


def test_the_root_cause_is_read_from_torchruns_report_up_to_its_end_only():
    lines = ["Root Cause (first observed failure):", "[0]:", "  time      : 2026-12-01_22:00:00", "  host      : node1",
             "  rank      : 3 (local_rank: 1)", "  exitcode  : 1 (pid: 42)",
             "  error_file: /tmp/torchelastic_x/attempt_0/1/error.json",
             "  traceback : Traceback (most recent call last):", '    File "/workspace/train.py", line 5, in <module>',
             "      main()", "  ValueError: bad batch", "============================================================",
             "KeyError: a line after the report"]
    cause = parse_root_cause(lines)
    assert (cause.rank, cause.local_rank, cause.exit_code) == (3, 1, 1)
    assert (cause.error_file, cause.exception) == ("/tmp/torchelastic_x/attempt_0/1/error.json", "ValueError: bad batch")
    # an exit code with the signal's name after it (as a report of a worker killed by one may give it)
    signalled = parse_root_cause(lines[:5] + ["  exitcode  : -15 (pid: 13623)  (SIGTERM)", "  error_file: <N/A>",
                                              "  traceback : Signal 15 (SIGTERM) received by PID 13623", lines[-2]])
    assert (signalled.exit_code, signalled.exception) == (-15, "SIGTERM")


def test_a_workers_log_gives_the_exception_and_its_whole_traceback_a_quoted_one_within_it(tmp_path):
    """torch's DataLoader quotes its worker process's traceback inside the error it raises, after
    "Original ": that is part of the rank's traceback, not the start of another."""
    import os

    body = ["Traceback (most recent call last):", '  File "/workspace/train.py", line 20, in <module>',
            "    for batch in loader:", "ValueError: Caught ValueError in DataLoader worker process 0.",
            "Original Traceback (most recent call last):",
            '  File "/opt/venv/torch/utils/data/_utils/worker.py", line 308, in _worker_loop',
            "    data = fetcher.fetch(index)", "ValueError: bad sample"]
    log = tmp_path / "stderr.log"
    log.write_text("\n".join(["[rank0]: loss 0.5", *(f"[rank0]: {line}" for line in body)]) + "\n")
    cause = RootCause(0, 0, 1)
    cause.add_worker_log(log)
    assert (cause.exception, cause.traceback, cause.timestamp) == ("ValueError: bad sample", "\n".join(body),
                                                                   os.stat(log).st_mtime)
    # what the hook said after the error (a post-mortem's wait for `debug RUN RANK`) is not part of the traceback,
    # but an error's own lines after its first are
    waits = "[ddp-compose] rank 0 stopped in its debugger at train.py:20 in <module>: uncaught RuntimeError: Error(s)"
    multi = [*body[:3], "RuntimeError: Error(s) in loading state_dict for Linear:", '\tMissing key(s) in state_dict: "bias".']
    log.write_text("\n".join(f"[rank0]: {line}" for line in [*multi, waits]) + "\n")
    cause = RootCause(0, 0, 1)
    cause.add_worker_log(log)
    assert (cause.exception, cause.traceback) == ("RuntimeError: Error(s) in loading state_dict for Linear:",
                                                  "\n".join(multi))


def test_a_frame_line_is_pythons_shape_not_any_line_that_names_a_file():
    from orchestrate.outcome.root_cause import is_frame_line

    assert is_frame_line('[rank0]:   File "/workspace/train.py", line 9, in main')
    assert is_frame_line('  File "<string>", line 1')
    assert not is_frame_line('File "ckpt.pt" saved at step 9')
    assert not is_frame_line("loss 0.5")


def test_the_exceptions_linked_in_a_chain_leave_out_a_link_to_the_same_error():
    chain = ("raised while handling the same error", "caused by: OSError: disk", "raised while handling: KeyError: 'a'")
    assert linked_exceptions(chain) == ["OSError: disk", "KeyError: 'a'"]
    assert linked_exceptions(chain, CAUSED_BY) == ["OSError: disk"]
