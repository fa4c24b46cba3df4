"""torch.distributed.checkpoint's collectives named in the record: a collective made inside one
of DCP's entry points is ``in dcp.save`` (the outermost, the one the user called)."""
from __future__ import annotations

import os
import sys

from orchestrate.node.checkpoint_collectives import describe

SITE = os.path.join(os.sep, "venv", "site-packages", "torch", "distributed")
SAVER = os.path.join(SITE, "checkpoint", "state_dict_saver.py")
UTILS = os.path.join(SITE, "checkpoint", "utils.py")
C10D = os.path.join(SITE, "distributed_c10d.py")


def described(*chain: tuple[str, str]) -> object:
    """What describe says for a collective called from this test (the user's frame) through
    functions named as given, defined as if in the given files (outermost first)."""
    def collective():
        return describe("gather_object", sys._getframe(1))

    call = collective
    for filename, function in reversed(chain):
        scope = {"inner": call}
        exec(compile(f"def {function}():\n    return inner()\n", filename, "exec"), scope)
        call = scope[function]
    return call()


def test_a_collective_inside_dcps_save_or_load_is_named_for_it_and_the_outermost_entry_wins():
    assert described((SAVER, "save"), (SAVER, "_save_state_dict"), (UTILS, "gather_object"), (C10D, "wrapper")) == \
        "in dcp.save"
    assert described((SAVER, "load"), (UTILS, "reduce_scatter"), (C10D, "wrapper")) == "in dcp.load"
    # the older entry point calling the newer one: the user's call is the outer
    assert described((SAVER, "save_state_dict"), (SAVER, "save"), (C10D, "wrapper")) == "in dcp.save_state_dict"


def test_dcps_helpers_and_the_users_own_collectives_keep_their_description():
    assert described((os.path.join(SITE, "checkpoint", "state_dict.py"), "get_state_dict"), (C10D, "wrapper")) is None
    assert described((C10D, "wrapper")) is None
    # a function named save outside DCP's files (the user's own, torch's elsewhere) is not DCP's
    assert described((os.path.join(SITE, "other.py"), "save"), (C10D, "wrapper")) is None
