"""What the console shows of the nodes' own lines: torchrun's INFO records and its
ChildFailedError report are left to the node log (one line in the report's place); workers'
lines and any other traceback always show."""
from __future__ import annotations

from orchestrate.supervise.console_filter import BACKTRACE_NOTE, LOGGED_TRACEBACK_NOTE, REPORT_NOTE, ConsoleFilter
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


def connect_failed(second: int) -> str:
    return (f"[W1130 07:39:{second:02d}.381603347 socket.cpp:767] [c10d] The client socket has failed to connect to"
            " [localhost]:12355 (errno: 99 - Cannot assign requested address).")


def test_a_torch_log_line_said_again_and_again_shows_once_then_its_count():
    lines = [OutputLine("node1", connect_failed(s), 0, 1) for s in range(5)]
    lines += [OutputLine("node0", connect_failed(9), 0, 0), OutputLine("node1", "rank 1 goes on", 0, 1)]
    console = ConsoleFilter()
    said = [(s.prefix, s.text) for line in lines for s in console.shown(line)]
    assert said == [("node1/rank1", connect_failed(0)), ("node0/rank0", connect_failed(9)),
                    ("node1/rank1", "(the same line 4 more times: see the node log, or -v)"),
                    ("node1/rank1", "rank 1 goes on")]
    # once: a count of one; torchrun's own (Python) log lines too, their pid apart
    agent = ["W1130 07:06:24.412000 8 torch/.../dynamic_rendezvous.py:1341] keep-alive heartbeat failed",
             "W1130 07:06:29.412000 8 torch/.../dynamic_rendezvous.py:1341] keep-alive heartbeat failed", "next"]
    assert shown([OutputLine("node0", text) for text in agent]) == [
        agent[0], "(the same line 1 more time: see the node log, or -v)", "next"]
    # a line said again with other words, or a script's own line said again, is shown each time
    other = [connect_failed(1), connect_failed(2).replace("12355", "12356"), "waiting", "waiting"]
    assert shown([OutputLine("node0", text, 0, 0) for text in other]) == other
    # ... and so is one said again after another line came between
    apart = [connect_failed(1), "retrying", connect_failed(2)]
    assert shown([OutputLine("node0", text, 0, 0) for text in apart]) == apart


def test_a_repeated_log_lines_backtraces_go_with_it_and_its_count_shows_when_the_stream_ends():
    warning = "[W1130 07:06:{:02d}.98 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed: Connection was likely closed"
    backtrace = ["Exception raised from recvBytes at Utils.hpp:682 (most recent call first):",
                 "frame #0: c10::Error::Error() + 0x80", "frame #1: <unknown function> + 0x891f5", ""]
    lines = [OutputLine("node1", text) for s in range(3) for text in (warning.format(s), *backtrace)]
    assert shown(lines) == [warning.format(0), BACKTRACE_NOTE]
    console = ConsoleFilter()
    for line in lines:
        console.shown(line)
    assert [(s.prefix, s.text) for s in console.flush("node1")] == [
        ("node1", "(the same line 2 more times: see the node log, or -v)")]
    assert console.flush("node1") == []  # said once
    # after another line, a backtrace shows again (as its one line)
    later = [OutputLine("node1", text) for text in (warning.format(5), *backtrace, "next", *backtrace)]
    assert shown(lines + later) == [warning.format(0), BACKTRACE_NOTE,
                                    "(the same line 3 more times: see the node log, or -v)", "next", BACKTRACE_NOTE]


def test_repeats_are_counted_per_worker_process_and_never_for_lines_the_console_leaves_out():
    # a restarted worker (another global rank on the same local rank) shows its first line again
    lines = [OutputLine("node1", connect_failed(1), 0, 1), OutputLine("node1", connect_failed(2), 0, 1),
             OutputLine("node1", "W1130 07:40:00.1 8 torch/.../api.py:725] restarting the workers"),
             OutputLine("node1", connect_failed(3), 0, 3), OutputLine("node1", "rank 3 goes on", 0, 3)]
    console = ConsoleFilter()
    said = [(s.prefix, s.text) for line in lines for s in console.shown(line)]
    assert said == [("node1/rank1", connect_failed(1)),
                    ("node1/rank1", "(the same line 1 more time: see the node log, or -v)"),
                    ("node1", lines[2].text), ("node1/rank3", connect_failed(3)), ("node1/rank3", "rank 3 goes on")]
    # ... so does one in a restarted container, whose stream began anew
    console = ConsoleFilter()
    for line in lines[:2]:
        console.shown(line)
    console.flush("node1")
    assert [s.text for s in console.shown(lines[0])] == [connect_failed(1)]
    # torchrun's INFO records are left to the log, and so are their repeats
    info = "I1123 01:03:22.761000 16858 torch/.../dynamic_rendezvous.py:1000] keep-alive"
    assert shown([OutputLine("node0", info)] * 3 + [OutputLine("node0", "next")], ended=True) == ["next"]


def test_a_workers_empty_line_after_a_repeated_warning_and_its_backtrace_shows():
    backtrace = ["Exception raised from recvBytes at Utils.hpp:682 (most recent call first):",
                 "frame #0: c10::Error::Error() + 0x80"]
    lines = [OutputLine("node0", text, 0, 0) for text in (connect_failed(1), *backtrace, connect_failed(2), "", "after")]
    assert shown(lines) == [connect_failed(1), BACKTRACE_NOTE, "(the same line 1 more time: see the node log, or -v)",
                            "", "after"]


def test_a_ranks_own_line_as_it_stops_in_its_debugger_is_left_to_the_logs_and_other_hook_notes_show():
    stop = ("[ddp-compose] rank 1 stopped in its debugger at bp.py:9 in <module>: breakpoint(); debug it with:"
            " python -m orchestrate debug r 1")  # the launcher says the same in its own line
    note = "[ddp-compose] rank 1 starts 2 processes of its own with torch.multiprocessing under torchrun"
    lines = [OutputLine("node0", text, 0, 1) for text in ("", stop, note, "step 3")]
    assert shown(lines) == ["", note, "step 3"]  # (an empty line before it still shows)


def test_a_nodes_stream_ending_says_its_own_counts_agent_first_then_by_rank_and_leaves_the_other_nodes_be():
    backtrace = ["Exception raised from recvBytes at Utils.hpp:682 (most recent call first):",
                 "frame #0: c10::Error::Error() + 0x80"]
    agent = "W1130 07:06:24.412000 8 torch/.../dynamic_rendezvous.py:1341] keep-alive heartbeat failed"
    console = ConsoleFilter()
    lines = [OutputLine("node1", agent), OutputLine("node1", agent.replace("24.412", "29.412"))]
    lines += [OutputLine("node1", connect_failed(s), 1, 3) for s in range(2)]  # a worker's line ends only its run
    lines += [OutputLine("node1", connect_failed(s), 0, 2) for s in range(3)]
    lines += [OutputLine(node, text) for node in ("node0", "node1") for text in backtrace]  # both in a backtrace
    lines += [OutputLine("node0", connect_failed(s), 0, 0) for s in range(2)]  # node0's rank 0: muted, said again
    for line in lines:
        console.shown(line)
    assert [(s.prefix, s.text) for s in console.flush("node1")] == [
        ("node1", "(the same line 1 more time: see the node log, or -v)"),
        ("node1/rank2", "(the same line 2 more times: see the node log, or -v)"),
        ("node1/rank3", "(the same line 1 more time: see the node log, or -v)")]
    # node0 is still in its backtrace: its next frame stays out; node1's stream began anew: its frame shows
    assert console.shown(OutputLine("node0", "frame #1: <unknown function> + 0x891f5")) == []
    assert [s.text for s in console.shown(OutputLine("node1", "frame #1: x"))] == ["frame #1: x"]
    assert console.shown(OutputLine("node0", backtrace[0], 0, 0)) == []  # its rank 0's repeat's backtrace


def test_the_traceback_under_a_torchrun_log_record_becomes_one_line_between_the_record_and_its_exception():
    header = "E1205 14:32:06.395000 8 torch/distributed/elastic/agent/server/api.py:965] "
    record = [header + text for text in [
        "Error waiting on exit barrier. Elapsed: 0.168 seconds", "Traceback (most recent call last):",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/agent/server/api.py", line 951,'
        " in _exit_barrier", "    store_util.barrier(", "    ^^^^^^^^^^^^^^^^^^^", "",
        "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes."]]
    lines = [OutputLine("node1", text) for text in record[:3]]
    lines.append(OutputLine("node1", "a worker's line between", 0, 1))
    lines += [OutputLine("node1", text) for text in record[3:]]
    lines.append(OutputLine("node1", header.replace("965", "966") + "    indented, another record's"))
    assert shown(lines) == [record[0], LOGGED_TRACEBACK_NOTE, "a worker's line between", record[-1],
                            header.replace("965", "966") + "    indented, another record's"]
    # a record of another place, or a line of the node's own, ends the traceback: what follows shows
    other = OutputLine("node1", "W1205 14:32:07.000000 8 torch/distributed/run.py:1] " + "  File \"x.py\", line 1")
    plain = OutputLine("node1", "    plain indented line")
    assert shown([OutputLine("node1", t) for t in record[:3]] + [other]) == [record[0], LOGGED_TRACEBACK_NOTE,
                                                                            other.text]
    assert shown([OutputLine("node1", t) for t in record[:3]] + [plain]) == [record[0], LOGGED_TRACEBACK_NOTE,
                                                                            plain.text]
    # a worker's own torch log record's traceback is its own business: every line shows
    worker = [OutputLine("node1", text, 0, 1) for text in record]
    console = ConsoleFilter()
    assert [s.text for line in worker for s in console.shown(line)] == record
