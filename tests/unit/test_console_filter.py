"""What the console shows of the nodes' own lines: torchrun's INFO records and its
ChildFailedError report are left to the node log (one line in the report's place); workers'
lines and any other traceback always show."""
from __future__ import annotations

from orchestrate.supervise.console_filter import REPORT_NOTE, ConsoleFilter
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
