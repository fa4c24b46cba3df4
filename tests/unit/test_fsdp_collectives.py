"""FSDP's collectives named in the record for what they move: frames of FSDP's own files between
the collective and the user's line say so, and the module is named as the user wrote it."""
from __future__ import annotations

import os

from orchestrate.node.collective_log import CollectiveLog
from orchestrate.node.fsdp_collectives import GRADIENTS, PARAMETERS, class_name, describe, install, module_name

FSDP_FILE = os.path.join(os.sep, "venv", "site-packages", "torch", "distributed", "fsdp", "_fully_shard",
                         "_fsdp_param_group.py")
TORCH_FILE = os.path.join(os.sep, "venv", "site-packages", "torch", "distributed", "distributed_c10d.py")


class Linear:
    pass


class FSDPLinear(Linear):  # what fully_shard makes of a Linear
    pass


class ParamGroup:
    def __init__(self, *modules) -> None:
        self.modules = modules


def frame_of(op: str, *files: str, owner=None, functions=None):
    """What describe says for ``op`` called from this test (the user's frame) through functions
    defined as if in ``files`` (outermost first; each frame's ``self`` is ``owner``), then torch's
    own file, as a collective's wrapper sees its caller."""
    import sys

    def collective():
        return describe(op, sys._getframe(1))

    call = collective
    chain = (*files, *(functions or {}), TORCH_FILE)  # ``functions``: files whose function has that name
    for filename in reversed(chain):
        function = (functions or {}).get(filename, "call")
        scope = {"inner": call}
        exec(compile(f"def {function}(self):\n    return inner() if inner.__code__.co_argcount == 0 else inner(self)\n",
                     filename, "exec"), scope)
        call = scope[function]
    return call(owner)


def test_fsdps_gathering_of_parameters_and_reduction_of_gradients_are_named_for_the_module():
    group = ParamGroup(FSDPLinear())
    collectives = FSDP_FILE.replace("_fsdp_param_group.py", "_fsdp_collectives.py")
    gather, reduce = {collectives: "foreach_all_gather"}, {collectives: "foreach_reduce"}
    assert frame_of("all_gather_into_tensor", FSDP_FILE, owner=group, functions=gather) == f"{PARAMETERS}(Linear)"
    assert frame_of("reduce_scatter_tensor", FSDP_FILE, owner=group, functions=reduce) == f"{GRADIENTS}(Linear)"
    # HSDP's all-reduce of gradients across the replicas is inside the same reduction
    assert frame_of("all_reduce", FSDP_FILE, owner=group, functions=reduce) == f"{GRADIENTS}(Linear)"
    # FSDP1's gathering of a flat parameter, no module found in FSDP's frames: FSDP alone
    flat = {FSDP_FILE.replace("_fully_shard/_fsdp_param_group.py", "_flat_param.py"): "_all_gather_flat_param"}
    assert frame_of("all_gather", owner=None, functions=flat) == PARAMETERS
    # a collective FSDP makes elsewhere (its optimizer state's gather, clip_grad_norm_'s all-reduce,
    # its construction's broadcast), or the user's own: the tensors describe it
    assert frame_of("all_gather_into_tensor", FSDP_FILE, owner=group) is None
    assert frame_of("all_reduce", FSDP_FILE, owner=group, functions={collectives: "clip_grad_norm_"}) is None
    assert frame_of("all_gather_into_tensor", owner=group, functions={TORCH_FILE: "foreach_all_gather"}) is None


def test_the_module_is_named_as_its_user_wrote_it_and_an_owner_that_says_nothing_names_none():
    assert class_name(FSDPLinear()) == "Linear" and class_name(Linear()) == "Linear"

    class FSDPNet:  # a user's class that happens to start FSDP: its own name
        pass

    assert class_name(FSDPNet()) == "FSDPNet"

    class Handle:  # FSDP1's handle of its wrapped module
        _fully_sharded_module = Linear()

    class Raising:
        @property
        def modules(self):
            raise RuntimeError("no")

    assert module_name(Handle()) == "Linear" and module_name(ParamGroup()) == "" and module_name(Raising()) == ""


def test_a_describer_names_an_entry_and_one_that_fails_leaves_it_to_the_tensors():
    log = CollectiveLog()
    install(log)
    install(log)  # once only
    assert log.describers == [describe]

    class Tensor:
        shape, dtype = (4,), "torch.float32"

    assert log.describe("all_reduce", (Tensor(),), None) == "float32[4]"
    log.describers.insert(0, lambda op, frame: 1 / 0)
    log.describers.insert(1, lambda op, frame: "parameters of FSDP(Net)" if op == "all_gather_into_tensor" else None)
    # the name, then the tensors: two ranks gathering different modules still differ
    assert log.describe("all_gather_into_tensor", (Tensor(),), None) == "parameters of FSDP(Net): float32[4]"
    assert log.describe("all_gather_into_tensor", ("not a tensor",), None) == "parameters of FSDP(Net)"
    assert log.describe("all_reduce", (Tensor(),), None) == "float32[4]"
