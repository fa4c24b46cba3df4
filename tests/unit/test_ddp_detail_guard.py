"""When the workers' hook guards DDP under torch's DETAIL debug level: wherever the run's nodes
get it (--debug-collectives, or the user's own --env), and nowhere else. What the guard does
in a worker is tested on real nodes (tests/integration/test_hangs.py: a DDP job under
--debug-collectives trains until torch names its mismatched collectives)."""
from __future__ import annotations

import pytest

from orchestrate.node.ddp_detail_guard import wanted


@pytest.mark.parametrize("value, guarded", [
    ("DETAIL", True), ("detail", True), (" Detail\n", True), ("INFO", False), ("OFF", False), ("", False),
])
def test_the_guard_goes_in_for_the_detail_level_however_it_is_spelled(value, guarded):
    assert wanted({"TORCH_DISTRIBUTED_DEBUG": value}) is guarded


def test_no_debug_level_no_guard():
    assert wanted({"RANK": "0"}) is False


def test_debug_collectives_gives_every_node_the_level_the_guard_goes_in_for(make_job):
    asked = make_job(nodes=2, debug_collectives=True)
    assert all(wanted(node.env) for node in asked.nodes)
    assert not any(wanted(node.env) for node in make_job(nodes=2).nodes)
