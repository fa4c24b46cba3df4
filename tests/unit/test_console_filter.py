"""What the console shows of the nodes' own lines: torchrun's INFO records and its
ChildFailedError report are left to the node log (one line in the report's place); workers'
lines and any other traceback always show."""
from __future__ import annotations

from orchestrate.supervise.console_filter import BACKTRACE_NOTE, REPORT_NOTE, ConsoleFilter
from orchestrate.supervise.worker_lines import OutputLine

TORCHRUN_REPORT = """Traceback (most recent call last):
  File "/opt/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  exitcode  : 2 (pid: 10)
============================================================""".splitlines()


def shown(lines: list[OutputLine], ended: bool = False) -> list[str]:
    console = ConsoleFilter()
    texts = [s.text for line in lines for s in console.shown(line)]
    return texts + ([s.text for s in console.flush("node0")] if ended else [])


def test_torchruns_report_becomes_one_line_and_workers_lines_pass_through_it():
    lines = [OutputLine("node0", "E1123 ... failed (exitcode: 2) local_rank: 0")]
    lines += [OutputLine("node0", text) for text in TORCHRUN_REPORT[:5]]
    lines.append(OutputLine("node0", "a worker's last words", 0, 0))  # interleaved
    lines += [OutputLine("node0", text) for text in TORCHRUN_REPORT[5:]]
    lines.append(OutputLine("node0", "after the report"))
    assert shown(lines) == ["E1123 ... failed (exitcode: 2) local_rank: 0", "a worker's last words", REPORT_NOTE,
                            "after the report"]


def test_other_tracebacks_and_a_held_line_at_the_end_of_a_stream_show():
    other = ["Traceback (most recent call last):", '  File "/opt/ddp-compose/orchestrate/node/main.py", line 3',
             "ValueError: boom"]
    assert shown([OutputLine("node0", t) for t in other]) == other
    assert shown([OutputLine("node0", other[0])], ended=True) == [other[0]]


def test_torchruns_info_records_are_left_to_the_log():
    info = OutputLine("node0", "I1123 01:03:22.761000 16858 torch/distributed/elastic/agent/server/api.py:890] round")
    warning = OutputLine("node0", "W1123 01:03:22.761000 16858 torch/distributed/elastic/agent/server/api.py:725] x")
    assert shown([info, warning]) == [warning.text]


def test_a_cpp_backtrace_becomes_one_line_after_its_warning_for_a_node_and_a_worker():
    warning = ("[W1130 07:06:24.989687359 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on SocketImpl(fd=3):"
               " Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?")
    backtrace = ["Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:682 (most recent"
                 " call first):",
                 "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x80 (0x7f57 in libc10.so)",
                 *[f"frame #{i}: <unknown function> + 0x891f5 (0x7f5773db71f5 in libc.so.6)" for i in range(1, 23)], ""]
    after = ["W1130 ... keep-alive heartbeat failed", "frame #9: a line like a frame, once the backtrace is over"]
    node = [OutputLine("node1", text) for text in [warning, *backtrace, *after]]
    assert shown(node) == [warning, BACKTRACE_NOTE, *after]
    worker = [OutputLine("node1", text, 0, 1) for text in [*backtrace[:5], "rank 1 goes on"]]
    console = ConsoleFilter()
    said = [s for line in worker for s in console.shown(line)]
    assert [(s.text, s.prefix) for s in said] == [(BACKTRACE_NOTE, "node1/rank1"), ("rank 1 goes on", "node1/rank1")]
    # a line like a frame, outside a backtrace, shows; so does each line of torchrun's report around one
    assert shown([OutputLine("node1", "frame #3: not after a backtrace")]) == ["frame #3: not after a backtrace"]
    report = [OutputLine("node0", text) for text in TORCHRUN_REPORT[:5] + backtrace[:3] + TORCHRUN_REPORT[5:]]
    assert shown(report) == [REPORT_NOTE]
