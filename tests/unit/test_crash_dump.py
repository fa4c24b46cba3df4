"""Reading faulthandler's dumps and a C++ abort's last lines (pure)."""
from __future__ import annotations

from orchestrate.hangs.crash_dump import last_dump
from orchestrate.outcome.root_cause import native_exception

SCRIPT_THREAD = '''Thread 0x00007f11dc621040 (most recent call first):
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2942 in all_reduce
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81 in wrapper
  File "/opt/ddp-compose/orchestrate/node/collective_log.py", line 111 in call
  File "/workspace/train.py", line 9 in <module>
  File "<frozen runpy>", line 88 in _run_code
  File "/opt/ddp-compose/orchestrate/node/worker_start.py", line 189 in <module>
'''
SNAPSHOT_THREAD = '''Thread 0x00007f11dbfbb6c0 (most recent call first):
  File "/opt/ddp-compose/orchestrate/node/snapshot.py", line 98 in serve
  File "/usr/lib/python3.11/threading.py", line 975 in run
'''


def dump(fatal: str, *threads: str) -> str:
    return f"Fatal Python error: {fatal}\n\n" + "\n".join(threads) + "\nExtension modules: torch._C (total: 1)\n"


def test_a_native_threads_abort_names_the_scripts_thread():
    found = last_dump(dump("Aborted", SNAPSHOT_THREAD, SCRIPT_THREAD))
    assert found.fatal == "Aborted"
    assert found.where() == "in a native thread, while the script was in all_reduce at train.py:9"


def test_a_crash_in_the_scripts_own_thread_names_its_call():
    current = SCRIPT_THREAD.replace("Thread 0x00007f11dc621040", "Current thread 0x00007f11dc621040")
    assert last_dump(dump("Segmentation fault", SNAPSHOT_THREAD, current)).where() == "in all_reduce at train.py:9"
    # the crashed thread ran Python, but not the script's: the script's thread is named as another
    crashed_elsewhere = SNAPSHOT_THREAD.replace("Thread 0x00007f11dbfbb6c0", "Current thread 0x00007f11dbfbb6c0")
    assert last_dump(dump("Bus error", crashed_elsewhere, SCRIPT_THREAD)).where() == \
        "in another thread, while the script was in all_reduce at train.py:9"
    no_frames = "Current thread 0x00007f11dbfbb6c0 (most recent call first):\n  <no Python frame>\n"
    assert last_dump(dump("Aborted", no_frames, SCRIPT_THREAD)).where() == \
        "in a native thread, while the script was in all_reduce at train.py:9"


def test_a_native_threads_abort_names_the_main_thread_not_a_thread_the_script_began():
    """Two threads of the script in collectives; gloo's thread aborted: the script's line is the
    main thread's (train.py:12), not its metrics thread's (train.py:7), whichever the dump lists first."""
    metrics = (SCRIPT_THREAD.replace("Thread 0x00007f11dc621040", "Thread 0x00007f11d0000000")
               .replace('  File "/workspace/train.py", line 9 in <module>\n  File "<frozen runpy>", line 88 in _run_code\n'
                        '  File "/opt/ddp-compose/orchestrate/node/worker_start.py", line 189 in <module>\n',
                        '  File "/workspace/train.py", line 7 in metrics\n'
                        '  File "/usr/lib/python3.11/threading.py", line 1012 in run\n'
                        '  File "/usr/lib/python3.11/threading.py", line 1075 in _bootstrap_inner\n'
                        '  File "/usr/lib/python3.11/threading.py", line 1032 in _bootstrap\n'))
    main = SCRIPT_THREAD.replace("line 9 in <module>", "line 12 in <module>")
    assert "train.py\", line 7 in metrics" in metrics
    for threads in ((metrics, main), (main, metrics)):
        assert last_dump(dump("Aborted", SNAPSHOT_THREAD, *threads)).where() == \
            "in a native thread, while the script was in all_reduce at train.py:12"


def test_the_last_of_appended_dumps_counts_and_no_dump_is_none():
    first = dump("Aborted", SCRIPT_THREAD)
    second = dump("Segmentation fault", SCRIPT_THREAD.replace("line 9 in <module>", "line 30 in <module>"))
    assert last_dump(first + second).where().endswith("train.py:30")
    assert last_dump(first + second).fatal == "Segmentation fault"
    assert last_dump("") is None and last_dump("some text\n") is None
    assert last_dump(dump("Aborted", SNAPSHOT_THREAD)).where() == ""  # no thread was in the script


def test_a_cpp_exceptions_type_and_what_are_the_error():
    lines = ["step 1 sum 8.0", "[rank0]: terminate called after throwing an instance of 'gloo::EnforceNotMet'",
             "[rank0]:   what():  [enforce fail at pair.cc:456] 8 vs 4. Received data size doesn't match"]
    assert native_exception(lines) == "gloo::EnforceNotMet: [enforce fail at pair.cc:456] 8 vs 4. Received data size" \
                                      " doesn't match"
    assert native_exception(lines[:2]) == "gloo::EnforceNotMet"
    # stdout and stderr tailed apart (as a CI run had it): the script's own lines in between
    interleaved = [lines[1], "[rank0]: [Gloo] Rank 0 is connected to 1 peer ranks.", "[rank0]: step 1 done", lines[2],
                   "[rank0]: step 2 done"]
    assert native_exception(interleaved) == native_exception(lines)
    assert native_exception(["terminate called without an active exception", "Traceback"]) == ""
    assert native_exception([]) == ""  # no lines at all (a worker that printed nothing)


def test_a_header_that_names_its_thread_is_read_too():
    named = SCRIPT_THREAD.replace("Thread 0x00007f11dc621040 (most", "Current thread 0x00007f11dc621040 [MainThread] (most")
    assert last_dump(dump("Segmentation fault", named)).where() == "in all_reduce at train.py:9"
