"""DDP's own collectives, in the collective record: its gradient all-reduces, the broadcast of
its buffers in every forward pass and of its rebuilt buckets in one, and the check and broadcast
of its construction.

DDP issues these from C++ (``dist._broadcast_coalesced``, its reducer), out of reach of the
Python collectives :mod:`orchestrate.node.collective_log` wraps. Unrecorded, a rank that waits
there looked like a rank in no collective at all, and a script whose ranks part (one rank in an
extra ``barrier()``, the other in its next ``loss.backward()``; rank 0 alone evaluating its DDP
model, whose forward pass broadcasts its buffers) was diagnosed as "rank 0 is not in a
collective".

A forward pass that synchronizes the model's buffers (``broadcast_buffers=True``, the default,
and a model with buffers: BatchNorm's running statistics) is recorded as
``broadcast(buffers of DDP(Net))``, and the construction as ``all_gather(parameter shapes of
DDP)`` then ``broadcast(parameters of DDP(Net))``, each at the user's line that made it (the
end of a ``Join`` broadcasts the parameters again: recorded under the same name). Under a
``Join``, the ranks first agree on the rank to take the buffers from: that ``all_reduce`` is
recorded apart, before the broadcast, on every rank alike.

The forward pass after a model's first backward pass (its second with ``static_graph=True``;
never with ``find_unused_parameters=True``) first broadcasts the gradient buckets rank 0 rebuilt
in the order the gradients came (the reducer's ``_rebuild_buckets``): recorded as
``broadcast(rebuilt buckets of DDP(Net))`` at the forward pass's line, before its buffers. The
reducer says whether it rebuilt only as it returns, so the entry is made as it is called and
taken back out where it did not.

A backward pass (``torch.autograd.backward``, which ``loss.backward()`` calls) that follows a
DDP model's forward pass made with gradients on and synchronization wanted (not under
``no_sync()``) is recorded as one collective: ``all_reduce(gradients of DDP(Net))`` in the
model's process group, at the user's line that called it. It is one entry however many buckets
the reducer all-reduces, and the collectives made while it runs (a Python comm hook's, on any
thread) are part of it, so every rank of a job records the same and the numbering lines the
ranks up. A backward pass with no DDP forward pass before it (a probe's, rank 0's own) is not
recorded. A rank that has joined (``torch.distributed.algorithms.join.Join``, uneven inputs)
shadows the others' gradient all-reduce: that is recorded as the same entry. On a GPU the
backward pass returns once its work and the all-reduces are queued on the GPU's streams: the
entry then stays ``queued`` (``running`` once the GPU is in it) until the GPU has finished it.

DDP's forward pass is seen where DDP tells the join context about it
(``Join.notify_join_context``, which every forward pass calls), and its buffers where DDP
broadcasts them, so DDP's own forward is not wrapped: a compiled model's graph is left as it is, and the wrappers are kept out of
``torch.compile``'s reach once it is imported.

Installed by the workers' start-up hook when DDP's module is imported. Standard library only;
torch is reached through its own modules once they are loaded.
"""
from __future__ import annotations

import functools
import importlib
import sys
import weakref
from typing import Any, Callable, Dict, List

from orchestrate.node.collective_log import CollectiveLog, caller, relative, when_imported

OP = "all_reduce"
DESCRIBED = "gradients of DDP("  # how the record's entries start (what they all-reduce)
BUFFERS = "buffers of DDP("  # a forward pass's broadcast of the model's buffers
PARAMETERS = "parameters of DDP("  # the construction's broadcast of the parameters (and buffers)
SHAPES = "parameter shapes of DDP"  # the construction's check that every rank's parameters match
REBUILT_BUCKETS = "rebuilt buckets of DDP("  # a forward pass's broadcast of the buckets rebuilt after the first step
# What the reducer's own check says as it is asked to rebuild, before any broadcast: the step before left its
# reduction unfinished (parameters the loss left out). Its error is the script's, not a failed collective.
REDUCER_CHECKS = ("Expected to have finished reduction in the prior iteration",)
# The passes of a training step, as the record counts them by their lines (CollectiveLog.passes).
BACKWARD_PASS = "backward pass"
FORWARD_PASS = "forward pass"


def described(models: List[Any]) -> str:
    """``gradients of DDP(Net)`` (every model named, in the order of their forward passes)."""
    return "gradients of " + ", ".join(f"DDP({model_name(m)})" for m in models)


def model_name(module: Any) -> str:
    """The wrapped model's class name (``Net`` of ``DDP(Net)``, of ``DDP(torch.compile(Net))`` too)."""
    inner = getattr(module, "module", module)
    return type(getattr(inner, "_orig_mod", inner)).__name__


_MODEL_GPUS: "weakref.WeakKeyDictionary[Any, tuple]" = weakref.WeakKeyDictionary()


def model_gpus(model: Any) -> tuple:
    """The CUDA devices of a DDP model's parameters (none on the CPU), found once per model: its
    backward pass and gradient all-reduces run on those GPUs' streams, after the call returned."""
    if getattr(model, "device_type", None) != "cuda":
        return ()
    found = _MODEL_GPUS.get(model)
    if found is None:
        found = _MODEL_GPUS[model] = tuple(dict.fromkeys(p.device for p in model.parameters() if p.is_cuda))
    return found


def install(log: CollectiveLog, name_group: Callable[[Any], str]) -> None:
    """Note every DDP forward pass that wants its gradients synchronized, record the backward
    pass that follows and a joined rank's shadow of it, and record the forward pass's broadcast
    of the buffers and the construction's collectives (see the module's text)."""
    ddp = importlib.import_module("torch.nn.parallel.distributed").DistributedDataParallel
    join = importlib.import_module("torch.distributed.algorithms.join").Join
    autograd = importlib.import_module("torch.autograd")
    original_backward, original_notify = autograd.backward, join.notify_join_context
    original_shadow = getattr(ddp, "_match_all_reduce_for_bwd_pass", None)
    if getattr(original_backward, "__ddp_compose_recorded__", False):
        return
    forwarded: List["weakref.ReferenceType[Any]"] = []  # DDP models forwarded since the last backward pass
    forwarding: List[Any] = [None]  # the DDP model whose forward pass was the last to start (a weak reference)

    @functools.wraps(original_notify)
    def notify_join_context(joinable: Any) -> Any:
        if isinstance(joinable, ddp):
            forwarding[0] = weakref.ref(joinable)
            if (getattr(joinable, "require_backward_grad_sync", False) and sys.modules["torch"].is_grad_enabled()
                    and not any(ref() is joinable for ref in forwarded)):
                forwarded.append(weakref.ref(joinable))
        return original_notify(joinable)

    @functools.wraps(original_backward)
    def backward(*args: Any, **kwargs: Any) -> Any:
        models = [model for model in (ref() for ref in forwarded) if model is not None]
        forwarded.clear()
        if not models or log.nested():
            return original_backward(*args, **kwargs)
        group = name_group(getattr(models[0], "process_group", None))
        gpus = tuple(dict.fromkeys(device for model in models for device in model_gpus(model)))
        return log.call(original_backward, args, kwargs, OP, group, described(models), caller(sys._getframe(1)),
                        exclusive=True, gpus=gpus, counted_as=BACKWARD_PASS)

    def shadow(self: Any, *args: Any, **kwargs: Any) -> Any:
        """A joined rank's part in the others' gradient all-reduce."""
        assert original_shadow is not None
        group = name_group(getattr(self, "process_group", None))
        return log.call(original_shadow, (self, *args), kwargs, OP, group, described([self]),
                        caller(sys._getframe(1)), exclusive=True, gpus=model_gpus(self), counted_as=BACKWARD_PASS)

    backward.__ddp_compose_recorded__ = True  # type: ignore[attr-defined]
    autograd.backward = backward
    join.notify_join_context = staticmethod(notify_join_context)
    wrappers = [backward, notify_join_context, described, name_group, log.call, log.enter, log.leave, caller, relative,
                model_gpus, log.gpu.place]
    if original_shadow is not None:
        ddp._match_all_reduce_for_bwd_pass = functools.wraps(original_shadow)(shadow)
        wrappers.append(shadow)
    wrappers += record_forward_and_construction(log, name_group, ddp, sys.modules[ddp.__module__])
    reducer = getattr(sys.modules["torch.distributed"], "Reducer", None)
    if reducer is not None:
        wrappers += record_bucket_rebuild(log, name_group, reducer, lambda: forwarding[0] and forwarding[0]())
    when_imported("torch._dynamo", lambda: keep_out_of_compile(wrappers))


def record_forward_and_construction(log: CollectiveLog, name_group: Callable[[Any], str], ddp: Any,
                                    module: Any) -> List[Callable[..., Any]]:
    """Record DDP's broadcast of its buffers in a forward pass (``_sync_module_buffers``) and
    the two collectives of its construction (the functions DDP's module calls them by), where
    this torch has them; return the wrappers. A torch that has none of them is left as it is."""
    wrappers: List[Callable[..., Any]] = []
    buffers = getattr(ddp, "_sync_module_buffers", None)
    if buffers is not None:
        @functools.wraps(buffers)
        def sync_module_buffers(self: Any, *args: Any, **kwargs: Any) -> Any:
            return recorded(log, buffers, (self, *args), kwargs, "broadcast",
                            name_group(getattr(self, "process_group", None)), f"{BUFFERS}{model_name(self)})",
                            gpus=model_gpus(self), counted_as=FORWARD_PASS)

        ddp._sync_module_buffers = sync_module_buffers
        wrappers.append(sync_module_buffers)
    verify = getattr(module, "_verify_param_shape_across_processes", None)
    if verify is not None:
        @functools.wraps(verify)
        def verify_param_shapes(process_group: Any, *args: Any, **kwargs: Any) -> Any:
            return recorded(log, verify, (process_group, *args), kwargs, "all_gather", name_group(process_group),
                            SHAPES)

        module._verify_param_shape_across_processes = verify_param_shapes
        wrappers.append(verify_param_shapes)
    states = getattr(module, "_sync_module_states", None)
    if states is not None:
        @functools.wraps(states)
        def sync_module_states(*args: Any, **kwargs: Any) -> Any:
            model = kwargs.get("module", args[0] if args else None)
            group = kwargs.get("process_group", args[1] if len(args) > 1 else None)
            gpus = tuple(dict.fromkeys(p.device for p in getattr(model, "parameters", list)() if p.is_cuda))
            return recorded(log, states, args, kwargs, "broadcast", name_group(group),
                            f"{PARAMETERS}{model_name(model)})", gpus=gpus)

        module._sync_module_states = sync_module_states
        wrappers.append(sync_module_states)
    return wrappers + [recorded, model_name]


def rebuilds_buckets(model: Any) -> bool:
    """Whether a DDP model's reducer may still rebuild its buckets: it does so once, in the forward
    pass after its first backward pass (its second with ``static_graph=True``), and never with
    ``find_unused_parameters=True`` (unless ``static_graph``)."""
    return not getattr(model, "_has_rebuilt_buckets", True) and (
        bool(getattr(model, "static_graph", False)) or not getattr(model, "find_unused_parameters", True))


def record_bucket_rebuild(log: CollectiveLog, name_group: Callable[[Any], str], reducer_class: Any,
                          forwarding: Callable[[], Any]) -> List[Callable[..., Any]]:
    """Record the broadcast of DDP's rebuilt buckets (the C++ reducer's ``_rebuild_buckets``, which
    a forward pass calls first: rank 0's new order of the buckets, sent to every rank) as
    ``broadcast(rebuilt buckets of DDP(Net))``, where ``forwarding()`` (the model whose forward
    pass is under way) may still rebuild them; return the wrappers. Whether a call broadcasts is
    known only once it returns (True) or raises (see :func:`broadcast_made`): one that did not is
    taken back out of the record.
    Unrecorded, a rank waiting there for a slow peer showed as in no collective, at its forward
    pass's line. A torch whose reducer has no such method is left as it is."""
    original = getattr(reducer_class, "_rebuild_buckets", None)
    if original is None:
        return []
    rebuilt: "weakref.WeakSet[Any]" = weakref.WeakSet()  # models seen to rebuild (a joined rank's too)

    @functools.wraps(original)
    def rebuild_buckets(reducer: Any) -> Any:
        model = forwarding()
        if (model is None or getattr(model, "reducer", None) is not reducer or model in rebuilt
                or not rebuilds_buckets(model) or log.nested()):
            return original(reducer)
        done = log.call(original, (reducer,), {}, "broadcast", name_group(getattr(model, "process_group", None)),
                        f"{REBUILT_BUCKETS}{model_name(model)})", caller(sys._getframe(1)), kept=broadcast_made)
        if done:
            rebuilt.add(model)
        return done

    reducer_class._rebuild_buckets = rebuild_buckets
    return [rebuild_buckets, rebuilds_buckets, broadcast_made]


def broadcast_made(outcome: Any) -> bool:
    """Whether a call of the reducer's ``_rebuild_buckets`` broadcast, by what it returned (True:
    it rebuilt) or raised (an error of the broadcast's, not of the reducer's check before it)."""
    if isinstance(outcome, BaseException):
        return not any(check in str(outcome) for check in REDUCER_CHECKS)
    return outcome is True


def recorded(log: CollectiveLog, original: Callable[..., Any], args: tuple, kwargs: Dict[str, Any], op: str,
             group: str, shapes: str, gpus: tuple = (), counted_as: str = "") -> Any:
    """``original(*args, **kwargs)``, one of DDP's collectives, recorded at the user's line
    (inside another recorded call: left to that one); ``gpus``: where its work is queued;
    ``counted_as``: the pass of a training step it is."""
    if log.nested():
        return original(*args, **kwargs)
    return log.call(original, args, kwargs, op, group, shapes, caller(sys._getframe(2)), gpus=gpus,
                    counted_as=counted_as)


def keep_out_of_compile(functions: List[Callable[..., Any]]) -> None:
    """Have ``torch.compile`` run these as they are, never trace them (they are called outside
    any graph: traced, they only cost compile time and warnings). A torch without the way to
    say so is left as it is."""
    try:
        eval_frame = importlib.import_module("torch._dynamo.eval_frame")
        skip = eval_frame.FrameExecStrategy(eval_frame.FrameAction.SKIP, eval_frame.FrameAction.DEFAULT)
        for function in functions:
            eval_frame.set_code_exec_strategy(function.__code__, skip)
    except (ImportError, AttributeError, TypeError):
        pass
