"""A pytest plugin for ``python -m benchmarks.suite_cost --per-test``: each test's core-seconds.

Loaded with ``-p benchmarks.per_test_cpu`` in a suite run in one process (``-n 0``), it appends
one JSON line per test to the file named by ``$DDP_PER_TEST_CPU``: the test's id, the
core-seconds the whole machine spent busy while it ran (set-up and teardown included, from
``/proc/stat``: the nodes' processes are not the test's children) and its wall time. Run one
test at a time, on a quiet machine, each line is what that test costs.
"""
from __future__ import annotations

import json
import os
import time

import pytest

from benchmarks.suite_cost import PER_TEST_VARIABLE, busy_core_seconds

RECORDS = os.environ.get(PER_TEST_VARIABLE)  # None: record nothing


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start_cpu, start = busy_core_seconds(), time.monotonic()
    yield
    if RECORDS:
        record = {"test": item.nodeid, "core_s": round(busy_core_seconds() - start_cpu, 2),
                  "wall_s": round(time.monotonic() - start, 2)}
        with open(RECORDS, "a") as handle:
            handle.write(json.dumps(record) + "\n")
