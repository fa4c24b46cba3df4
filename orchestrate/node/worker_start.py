"""A worker's start-up hook: what a worker process needs before the user's script runs, where
the run asks for it. torchrun runs it as the training script, in place of the target::

    python3 worker_start.py [--nccl-hostid-per-rank] [--nccl-as-gloo] [--collective-timeout S] -- TARGET...

Every run uses it (it is cheap enough to leave on, see docs/debugging.md):

0. Where the run has a debug directory (``$DDP_DEBUG_DIR``): record the worker's collectives
   (:mod:`orchestrate.node.collective_log`, DDP's own collectives by
   :mod:`orchestrate.node.ddp_collectives`, FSDP's and DCP's named by
   :mod:`orchestrate.node.fsdp_collectives` and :mod:`orchestrate.node.checkpoint_collectives`), how its
   script called ``init_process_group`` beside what torchrun gave it (:mod:`orchestrate.node.init_record`),
   the keys its own store calls set and wait for, and the ``TCPStore`` it makes (:mod:`orchestrate.node.store_calls`),
   and answer the launcher's requests for its stacks
   (:mod:`orchestrate.node.snapshot`), let ``breakpoint()``, ``pdb.set_trace()`` and
   ``torch.distributed.breakpoint()`` wait for the host's ``debug RUN RANK``
   (:mod:`orchestrate.node.remote_debugger`), and keep every thread's stack should it die by a
   fatal signal, or be ended by SIGTERM (:mod:`orchestrate.node.crash_stacks`); and count its optimizer steps on the
   progress channel (:mod:`orchestrate.node.step_counter`), unless the script reports its own; and where it
   has a progress channel, let the launcher's storage faults reach the worker's writes
   (:mod:`orchestrate.node.storage_faults`), name the shared files it writes whole (those ``torch.save``
   saves said so), the files it writes on its node's own disk and those it loads with ``torch.load``
   (:mod:`orchestrate.node.shared_writes`), the checkpoint directories it saves and loads with
   ``torch.distributed.checkpoint`` (:mod:`orchestrate.node.dcp_files`), and a shuffling
   DistributedSampler iterated again with the same epoch (:mod:`orchestrate.node.sampler_epochs`).
   Where the run asks for torch's DETAIL debug level (``--debug-collectives``), keep DDP on gloo from crashing under it
   (:mod:`orchestrate.node.ddp_detail_guard`). A worker that starts processes of its own with
   ``torch.multiprocessing`` is told at once that torchrun's workers cannot
   (:mod:`orchestrate.node.spawn_note`).

1. ``--nccl-hostid-per-rank`` (``--share-gpus`` with more processes than GPUs on a node):
   ``NCCL_HOSTID`` = the node's host name and the worker's local rank, set before NCCL starts,
   so that two ranks of one node on one GPU count as different hosts, which NCCL allows.
2. ``--nccl-as-gloo`` (opt-in, with ``--backend gloo``): a script that asks
   ``init_process_group`` or ``new_group`` for ``nccl`` (or for none, on CUDA) gets gloo,
   which takes CUDA tensors too. Scripts that name their backend run unchanged.
3. ``--collective-timeout S``: ``init_process_group`` and ``new_group`` get a timeout of S
   seconds where the script gives none, so a collective that waits longer fails.

Then TARGET runs as ``python3 TARGET...`` would run it: a script (its directory first on
``sys.path``, ``__name__ == "__main__"``) or ``-m module``; an error it does not catch ends it
as under python3 (``sys.excepthook``, exit status 1), its traceback without this hook's frames
or the recorder's wrappers in the calls it made (with ``run --pdb``, a post-mortem of it waits for
the host's ``debug RUN RANK`` first: :func:`orchestrate.node.remote_debugger.post_mortem`); when
it returns (or exits 0, by ``os._exit(0)``
too), the worker says so on the progress channel (``finished``), so that the launcher can name a
rank that left while the others still needed it. Standard library only, until the shim wraps
torch's functions (torch is imported then, as the script would).
"""
from __future__ import annotations

import functools
import linecache
import os
import runpy
import socket
import sys
from typing import Any, Optional

USAGE = ("usage: worker_start.py [--nccl-hostid-per-rank] [--nccl-as-gloo] [--collective-timeout S]"
         " -- SCRIPT ARGS | -m MODULE ARGS")
SWITCHES = ("--nccl-hostid-per-rank", "--nccl-as-gloo")


def nccl_hostid(hostname: str, local_rank: str) -> str:
    """The NCCL host id of one worker: unique per node and local rank."""
    return f"{hostname}-local{local_rank}"


def as_gloo(backend: Optional[str]) -> Optional[str]:
    """The backend a script asked for, with nccl replaced by gloo (None, torch's default,
    becomes gloo for CPU and CUDA alike); any other backend unchanged."""
    if backend is None:
        return "cpu:gloo,cuda:gloo"
    text = str(backend)
    if "nccl" not in text.lower():
        return backend
    if ":" not in text:
        return "gloo"
    devices = dict(part.split(":", 1) for part in text.split(",") if ":" in part)
    return ",".join(f"{device}:{'gloo' if name.lower() == 'nccl' else name}" for device, name in devices.items())


def install_gloo_shim() -> None:
    """Wrap ``torch.distributed``'s ``init_process_group`` and ``new_group`` so that nccl
    becomes gloo (where the script finds them: the package and ``distributed_c10d``)."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    # init_process_group's backend None is torch's pick by device (nccl for CUDA); new_group's
    # is the default group's, which the shim already made gloo.
    for name, default_too in (("init_process_group", True), ("new_group", False)):
        wrapped = with_gloo_backend(getattr(c10d, name), default_too)
        setattr(c10d, name, wrapped)
        setattr(dist, name, wrapped)


def with_gloo_backend(original: Any, default_too: bool) -> Any:
    """``original`` with its ``backend`` argument, however it is passed, made gloo by
    :func:`as_gloo`; ``default_too``: a backend left out (None) is replaced too."""
    import inspect

    signature = inspect.signature(original)

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs)
        backend = bound.arguments.get("backend")
        if backend is not None or default_too:
            bound.arguments["backend"] = as_gloo(backend)
        return original(*bound.args, **bound.kwargs)

    return call


def split_argv(argv: list[str]) -> tuple[dict[str, Optional[str]], list[str]]:
    """The hook's flags (a switch's value is None) and the target, after ``--`` (which
    torchrun's own parser drops when it comes first, so it may be missing)."""
    given = list(argv)
    flags: dict[str, Optional[str]] = {}
    while given and given[0] != "--":
        flag = given.pop(0)
        if flag in SWITCHES:
            flags[flag] = None
        elif flag == "--collective-timeout":
            if not given:
                raise SystemExit(USAGE)
            flags[flag] = given.pop(0)
        elif not flags and not flag.startswith("--"):  # no flags and no "--": all of it is the target
            given.insert(0, flag)
            break
        else:
            raise SystemExit(USAGE)
    target = given[1:] if given[:1] == ["--"] else given
    if not target or (target[0] == "-m" and len(target) < 2):
        raise SystemExit(USAGE)
    return flags, target


def run_target(target: list[str]) -> None:
    """Run ``target`` as ``python3`` would: ``-m module args`` or ``script args``."""
    if target[0] == "-m":
        sys.argv = [target[1], *target[2:]]
        sys.path[0] = os.getcwd()  # as python -m has it, not this hook's own directory
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        return
    script = os.path.abspath(target[0])
    if not os.path.exists(script):  # python3's words and status
        print(f"{sys.executable}: can't open file {script!r}: [Errno 2] No such file or directory", file=sys.stderr)
        sys.exit(2)
    sys.argv = [target[0], *target[1:]]
    sys.path[0] = os.path.dirname(script)
    runpy.run_path(script, run_name="__main__")


def without_hook_frames(exc: BaseException) -> None:
    """Leave the hook's own frames out of ``exc``'s traceback, and out of those of the
    exceptions it was raised from or during (or groups), so that the script's traceback reads as
    under ``python3 script.py``; an error the hook's own code raised keeps them (not one a
    wrapper's call of a builtin raised: ``open`` of a missing file; nor a storage fault's, which
    the system would have raised: a full disk's ENOSPC)."""
    from orchestrate.node.snapshot import HOOK_DIR, calls_wrapped, is_hook_file  # importable since install_recorder
    from orchestrate.node.storage_faults import AS_THE_SYSTEM

    seen: set[int] = set()
    pending: list[Optional[BaseException]] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        entries = []
        entry = current.__traceback__
        while entry is not None:
            entries.append(entry)
            entry = entry.tb_next
        pending += [current.__cause__, current.__context__, *getattr(current, "exceptions", ())]
        as_the_system = getattr(current, AS_THE_SYSTEM, False)  # (a full disk's ENOSPC)
        if entries and raised_by_hook(entries[-1], HOOK_DIR, calls_wrapped) and not as_the_system:
            continue  # raised by the hook's own code: its frames are the story
        kept = [entry for entry in entries if not is_hook_file(entry.tb_frame.f_code.co_filename)]
        for earlier, later in zip(kept, kept[1:]):
            earlier.tb_next = later
        if kept:
            kept[-1].tb_next = None
        # nothing of the script's (a syntax error in it): python3 shows no frame either
        current.__traceback__ = kept[0] if kept else None


def raised_by_hook(innermost: Any, hook_dir: str, calls_wrapped: Any) -> bool:
    """Whether a traceback's innermost entry is the hook's own code, not a wrapper's call of what
    it wraps (a builtin such as ``open`` raises there, from C, with no frame of its own)."""
    filename = innermost.tb_frame.f_code.co_filename
    return filename.startswith(hook_dir) and not calls_wrapped(linecache.getline(filename, innermost.tb_lineno))


def install_recorder(timeout_s: Optional[float]) -> Any:
    """Record collectives and answer stack requests where the run has a debug directory; give
    process groups the run's collective timeout. Both go in when the script imports
    ``torch.distributed``, not before. Returns the collective record, said at the script's end."""
    # this file runs as a script: its package is importable from the checkout it lies in
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from orchestrate.node import (checkpoint_collectives, collective_log, crash_stacks, dcp_files, ddp_detail_guard,
                                  ddp_collectives, fsdp_collectives, init_record, loader_workers, remote_debugger,
                                  sampler_epochs, shared_writes, snapshot, spawn_note, step_counter, storage_faults,
                                  store_calls)
    from orchestrate.node.progress import (PROGRESS_DIR_ENV, report_dcp_saved, report_debugger, report_init_asked,
                                           report_init_call, report_loaded, report_same_shuffle, report_written,
                                           report_written_locally)

    log = collective_log.CollectiveLog()
    torchrun_gave = init_record.torchrun_gave(os.environ)  # before the script may change it
    name_group = collective_log.group_namer()
    directory = os.environ.get(snapshot.DEBUG_DIR_ENV)
    if directory:
        if snapshot.start(directory, log) is not None:  # spawned DataLoader workers answer too
            collective_log.when_imported("torch.utils.data._utils.worker", loader_workers.route_data_loader_workers)
        crash_stacks.dump_when_stopped(directory, int(os.environ.get("RANK", "0")))
        if crash_stacks.install(directory, int(os.environ.get("RANK", "0"))):
            collective_log.when_imported("torch.utils.data._utils.signal_handling",
                                         crash_stacks.keep_in_data_loader_workers)
            collective_log.when_imported("torch.distributed.elastic.multiprocessing.errors.error_handler",
                                         crash_stacks.keep_after_torch_record)
        # breakpoint(), pdb.set_trace() and torch.distributed.breakpoint() wait for `debug RUN RANK`
        remote_debugger.install(directory, int(os.environ.get("RANK", "0")), report_debugger, collective_log.relative)
        collective_log.when_imported("pdb", remote_debugger.route_pdb)
        collective_log.when_imported("torch.distributed", remote_debugger.route_torch_breakpoint)

    def keep_init_call(call: dict) -> None:  # in the snapshots, and said to the launcher at once
        log.init_call = call
        report_init_asked(call)

    def on_torch_distributed() -> None:
        collective_log.wrap_torch_distributed(log, name_group)
        if timeout_s is not None:
            collective_log.with_default_timeout(timeout_s)
        init_record.install(torchrun_gave, keep_init_call, lambda: collective_log.on_failure(log),
                            made=report_init_call)
        if directory:  # the keys the script's store calls set and wait for, in its snapshots
            log.store_calls = store_calls.StoreRecord()
            store_calls.install(log.store_calls)

    collective_log.when_imported("torch.distributed", on_torch_distributed)
    collective_log.when_imported("torch.nn.parallel.distributed", lambda: ddp_collectives.install(log, name_group))
    collective_log.when_imported("torch.distributed.fsdp", lambda: fsdp_collectives.install(log))
    collective_log.when_imported("torch.distributed.checkpoint", lambda: checkpoint_collectives.install(log))
    collective_log.when_imported("torch.optim", step_counter.install)
    collective_log.when_imported("torch.multiprocessing.spawn", spawn_note.install)
    if ddp_detail_guard.wanted(os.environ):
        collective_log.when_imported("torch.nn.parallel.distributed", ddp_detail_guard.install)
    progress = os.environ.get(PROGRESS_DIR_ENV)
    if progress:  # the launcher's storage faults reach open() and torch.save; the files they write are named
        faults = storage_faults.install(progress)
        collective_log.when_imported("torch.serialization", lambda: storage_faults.wrap_torch_save(faults))
        collective_log.when_imported("torch.utils.data.distributed",
                                     lambda: sampler_epochs.install(report_same_shuffle))
        local = functools.partial(report_written_locally, most=shared_writes.LOCAL_FILES_NOTED)
        shared_writes.install(report_written, local)
        saved = functools.partial(report_written, by_torch_save=True)
        collective_log.when_imported("torch.serialization", lambda: shared_writes.watch_torch_save(saved, local))
        collective_log.when_imported("torch.serialization", lambda: shared_writes.watch_torch_load(report_loaded))
        dcp_loaded = functools.partial(report_loaded, by_dcp=True)
        collective_log.when_imported("torch.distributed.checkpoint",
                                     lambda: dcp_files.install(report_dcp_saved, dcp_loaded))
    return log


def main(argv: list[str]) -> None:
    flags, target = split_argv(argv)
    if "--nccl-hostid-per-rank" in flags:
        os.environ["NCCL_HOSTID"] = nccl_hostid(socket.gethostname(), os.environ.get("LOCAL_RANK", "0"))
    timeout = flags.get("--collective-timeout")
    log = install_recorder(float(timeout) if timeout is not None else None)
    if "--nccl-as-gloo" in flags:
        install_gloo_shim()
    from orchestrate.node.progress import report_finished as report_script_finished  # importable since install_recorder
    from orchestrate.node.collective_log import at_end
    from orchestrate.node.step_counter import flush_installed

    def report_finished() -> None:  # a step the counter still holds first (an attempt that took one step)
        flush_installed()
        report_script_finished(at_end(log))  # with what it made in each process group, compared at the end

    report_a_quick_exit_too(report_finished)
    uncaught: Optional[BaseException] = None
    try:
        run_target(target)
    except SystemExit as exc:
        if exc.code is None or (isinstance(exc.code, int) and exc.code == 0):
            report_finished()
        raise
    except KeyboardInterrupt:
        raise  # Python's own ending for it (the exit status of SIGINT)
    except BaseException as exc:  # as python3 ends on it, but with the script's frames only
        without_hook_frames(exc)
        uncaught = exc
    if uncaught is not None:
        from orchestrate.node import collective_log
        from orchestrate.node.remote_debugger import post_mortem  # (run --pdb)

        collective_log.on_uncaught(uncaught)  # (the rank's record of a store call it dies of)
        end_as_python_does(uncaught, post_mortem)
    report_finished()


def report_a_quick_exit_too(report: Any) -> None:
    """Make ``os._exit(0)`` in this process say the script finished before it ends the process:
    scripts call it to skip a slow teardown, and it runs no ``finally`` or ``atexit``. A process
    forked from this one (a DataLoader worker, multiprocessing's children, which end by
    ``os._exit`` too) inherits the wrapper but not the process id, and says nothing."""
    real_exit, pid = os._exit, os.getpid()

    @functools.wraps(real_exit)
    def _exit(status: int) -> None:
        if status == 0 and os.getpid() == pid:
            report()
        real_exit(status)

    os._exit = _exit


def end_as_python_does(exc: BaseException, then: Any = lambda exc: None) -> None:
    """What python3 does with an uncaught error: ``sys.last_*`` set, ``sys.excepthook`` called
    outside any handler (and its own failure reported beside the error), exit status 1; ``then``
    (the post-mortem of ``run --pdb``) is given the error between the two."""
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, exc.__traceback__
    if sys.version_info >= (3, 12):
        sys.last_exc = exc
    try:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    except SystemExit:
        raise
    except BaseException as broken:
        print("Error in sys.excepthook:", file=sys.stderr)
        sys.__excepthook__(type(broken), broken, broken.__traceback__)
        print("\nOriginal exception was:", file=sys.stderr)
        sys.__excepthook__(type(exc), exc, exc.__traceback__)
    sys.stderr.flush()
    then(exc)
    sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
