"""A hang's diagnosis (pure): what each rank is doing, the ranks grouped by stack, and the first
divergence of their collectives; and whether two probes some seconds apart show progress."""
from __future__ import annotations

from dataclasses import dataclass, field
import re
from pathlib import Path
from typing import Any, Optional

from orchestrate.hangs.collectives import (UNEVEN_HINT, Divergence, alike, channel_ends, first_divergence, mismatch,
                                           step_counts)
from orchestrate.hangs.crash_dump import rank_dump, where_stopped
from orchestrate.hangs.init_calls import TORCH_WAITS, init_hints
from orchestrate.hangs.snapshots import (FAILED_REASON, STORE_FAILED_REASON, LoaderSnapshot, Probe, RankSnapshot,
                                         last_snapshots, training_pass, waits_at_own_lock, waits_for_data_loader)
from orchestrate.hangs.stacks import StackGroup, awaited_threads, group_stacks, shown_frames, summary
from orchestrate.hangs.store_calls import store_hints
from orchestrate.node.checkpoint_collectives import IN_DCP
from orchestrate.node.collective_log import NEW_GROUP
from orchestrate.node.ddp_collectives import BACKWARD_PASS, BUFFERS as DDP_BUFFERS
from orchestrate.node.fsdp_collectives import PARAMETERS as FSDP_PARAMETERS
from orchestrate.node.remote_debugger import POST_MORTEM_CALL, USER_POST_MORTEM_CALL
from orchestrate.text import format_byte_rate, ranks_text

# A rank that used this share of a core between two probes is computing, not waiting. A rank
# that waits uses next to none (its snapshot thread wakes four times a second), while a computing
# rank on a crowded host may get a small share: measured in CI, 68% then under 25% of a core.
BUSY_CPU_SHARE = 0.05
# Where no rank waits on another (none in a collective, in init_process_group or in a store call of
# its script's), a rank that used this share of a core is computing: on a host with 40 runnable
# processes on 2 cores a rank importing torch gets 4-5% of a core (seen in a user's trial at load
# 30-54), under BUSY_CPU_SHARE, while a rank asleep or at a lock uses what its snapshot thread
# does (its four wake-ups a second: well under 1%).
SLOW_CPU_SHARE = 0.02
# A rank in a collective whose TCP sockets moved this many bytes a second between two probes is
# moving the collective's data (a large buffer over a slow link: gloo's wait uses no CPU), not
# waiting. Measured (2026-12-07, 2 nodes, gloo): at --link rate=10mbit a 40 MB all_reduce moved
# about 2 MB/s per rank (sent and received); ranks hung in a collective for 43 s moved 0 bytes,
# static and elastic (c10d) rendezvous alike: the store's keep-alives are torchrun's agent's, not
# the rank's (its node's network counters grew 3 kB/s by them), and the snapshots and the progress
# channel are files. The threshold leaves room for a store's polls from the rank (a few hundred
# bytes a second) and still counts links down to about 0.3 mbit.
MOVING_BYTES_PER_S = 32 * 1024
# gloo's words when a rank receives more data than its collective expects: the ranks' collectives
# differ (another op, another size), and the receiving rank aborts (a C++ exception nobody catches).
GLOO_MISMATCH = "Is there a distributed collective mismatch in your code?"
# How torch's check of every collective (TORCH_DISTRIBUTED_DEBUG=DETAIL) says the ranks' differ,
# in the launcher's words and in torch's own.
CHECKED_MISMATCH = ("collectives differ", "Detected mismatch between collectives")
# A record written this little before the latest container start taken in is still counted: the
# engine stamps a start, and the workers their records, each as it reads the host's clock.
ATTEMPT_CLOCK_SLACK_S = 1.0
DEBUG_HINT = "rerun with --debug-collectives: torch then stops at the first mismatched collective, naming both"
# A mismatch in a run whose ranks already run torch's check (--debug-collectives, or TORCH_DISTRIBUTED_DEBUG=DETAIL
# by --env): it passed the mismatch by, so rerunning with it cannot help, and it is not suggested.
CHECKED_MISSED_HINT = ("this run already has torch's check of every collective (--debug-collectives:"
                       " TORCH_DISTRIBUTED_DEBUG=DETAIL), and it did not stop the ranks at this one: the calls above"
                       " differ in a way torch does not compare, and the ranks that made them wait for each other"
                       " until the timeout; every rank of the group must make the same call there (look for a branch"
                       " on the rank or on its data before it)")
# Some ranks in monitored_barrier, the others in barrier: the two never meet (monitored_barrier is made of sends to
# and receives from rank 0, which barrier never answers), and torch's check does not catch it (tried, 2026-12-07).
MIXED_BARRIERS = ("barrier", "monitored_barrier")
MIXED_BARRIERS_HINT = ("monitored_barrier and barrier do not meet: monitored_barrier's ranks exchange messages with"
                       " rank 0 that barrier never answers, so each side waits for the other (until"
                       " monitored_barrier's timeout), and torch's check (--debug-collectives) does not catch it;"
                       " every rank must make the same barrier call: monitored_barrier on every rank or on none")
NEW_GROUP_HINT = ("every rank must call new_group for every group, in the same order, the groups it is not in too:"
                  " torch pairs the calls by their order, so groups made on their members only take each other's"
                  " places; make every group on every rank and keep the one the rank is in"
                  " (dist.new_subgroups_by_enumeration does), or pass use_local_synchronization=True, which only"
                  " the members call")
# Every rank makes the same groups, but not in one order (a dict or set ordered differently on some ranks):
# NEW_GROUP_HINT would say to make every group on every rank, which such a script already does.
NEW_GROUP_ORDER_HINT = ("the ranks make the same groups in different orders: {order}; torch pairs the new_group calls"
                        " by their order, not by their ranks, so each group takes another's place and the ranks wait"
                        " in groups whose other members are making other ones; make the groups in one order on every"
                        " rank (from one list, not from a dict or a set whose order can differ from rank to rank)")
INIT_HINT = ("every rank waits in init_process_group, for its store or for the others: under torchrun leave"
             " init_method out (env://, the MASTER_ADDR and MASTER_PORT torchrun sets); an address the script names"
             " itself (tcp://localhost:...) must be one every node reaches, where a store listens")

# Why ranks in init_process_group wait for one that cannot answer (its node paused, its worker stopped).
INIT_AWAITS_ALL = "the process group forms only once every rank has joined it"

_SHORT_TIMEOUT = ("a rank computed outside any collective while the others waited for it: either its work (an"
                  " evaluation or a save on one rank) takes longer than the process group's timeout{timeout}, so"
                  " give {longer} or let every rank take part in that work; or it is in a loop that never ends, where"
                  " it is shown above")
# ... said to a run that did not set --collective-timeout (the script's own timeout, or torch's 10 or 30 minutes)
SHORT_TIMEOUT_HINT = _SHORT_TIMEOUT.format(timeout="",
                                           longer="init_process_group a longer timeout (or --collective-timeout)")
# ... where what timed out was a store call of the script's own: its own timeout, not the process group's
STORE_SHORT_TIMEOUT_HINT = ("a rank computed while the others waited in their script's own store call: either its work"
                            " takes longer than that store's timeout, so give the store a longer one"
                            " (TCPStore(..., timeout=timedelta(minutes=30)), store.set_timeout(...), or the wait's own"
                            " timeout argument); or it is in a loop that never ends, where it is shown above")

# The file of torch.multiprocessing's spawn and start_processes, in a waiting rank's stack.
SPAWN_FILE = "torch/multiprocessing/spawn.py"
SPAWN_HINT = ("every rank waits for processes it started with torch.multiprocessing.spawn: torchrun already starts one"
              " process per rank, and the processes a rank starts inherit torchrun's store (TORCHELASTIC_USE_AGENT_STORE),"
              " so their init_process_group waits for a store no one serves; under torchrun call the worker function"
              " once, with RANK, LOCAL_RANK and WORLD_SIZE from the environment, and leave MASTER_ADDR and MASTER_PORT"
              " as torchrun sets them")

# Why a rank cannot answer whose script returned while the others went on (the progress channel's
# word, and the engine's: no process of it runs, or its node finished): its activity is "exited".
EXITED = "has exited"
# The activities of ranks that did not answer a probe.
SILENT_STATES = ("stopped", "exited", "absent")
EXITED_HINT = ("a rank that exits while the others wait for it, in a collective or in init_process_group, leaves them"
               " waiting until the process group's timeout: every rank must call the same collectives (look for an"
               " early return or a branch on the rank)")
# Ranks that wait in init_process_group for others that have not called it: the others wait
# before it, for something else (a file, a lock, a download).
NOT_JOINED = "not in init_process_group yet"
NOT_JOINED_HINT = ("init_process_group returns on no rank before every rank has called it: a rank that waits for"
                   " something else before it (a file, a lock, a download only some ranks make) leaves the others"
                   f" waiting there until its timeout, {TORCH_WAITS}")


def in_init(group: StackGroup) -> bool:
    """Whether a group of ranks waits in ``init_process_group`` (for its store, or the others)."""
    return group.where.startswith("init_process_group ")


# A DDP model's forward pass broadcasts its buffers: the frames of it in a failed rank's traceback
# (each a set of words that are all in it).
DDP_FORWARD_FRAMES = (("in _sync_buffers",), ("in _sync_module_buffers",))
# Where a fault of the run's cuts the nodes' network (a partition, a node disconnected) while ranks
# wait in collectives: the hang is the fault's, as asked, and says what a real cluster would do.
CUT_HINT = ("the ranks wait on peers that {faults} cut off: a collective across a cut network is not failed by gloo or"
            " NCCL, which wait out the process group's timeout (--collective-timeout, else torch's 10-30 min), as on"
            " a real cluster; give the fault an end in seconds (@t=5..20: no step comes while it lasts) to see whether"
            " the job goes on once the network heals")
DDP_FORWARD_HINT = ("a DDP model's forward pass broadcasts the model's buffers from rank 0 (broadcast_buffers=True, the"
                    " default; BatchNorm's running statistics are buffers), so it is a collective every rank must"
                    " make: a forward pass only some ranks make (an evaluation on rank 0 alone, a step the others do"
                    " not take) waits for the others; evaluate through model.module where one rank does, or on every"
                    " rank")

# An FSDP model's forward pass gathers its parameters: the frames of it in a failed rank's traceback
# (FSDP2's, FSDP1's, or where the traceback's last lines show only the innermost: an all-gather
# called from FSDP's files).
FSDP_FORWARD_FRAMES = (("in foreach_all_gather",), ("in _all_gather_flat_param",),
                       ("/torch/distributed/fsdp/", "in all_gather_into_tensor"))
FSDP_FORWARD_HINT = ("an FSDP model's forward pass gathers each sharded module's parameters from every rank, so it is a"
                     " collective every rank must make: a forward pass only some ranks make (an evaluation on rank 0"
                     " alone, a step the others do not take) waits for the others; evaluate on every rank and reduce"
                     " the result (dist.all_reduce), or on a full copy of the weights that every rank takes part in"
                     " gathering (get_model_state_dict(model, options=StateDictOptions(full_state_dict=True)))")
# torch.distributed.checkpoint's save and load: the frames of them in a failed rank's traceback.
DCP_FRAMES = (("/torch/distributed/checkpoint/state_dict_saver.py",),
              ("/torch/distributed/checkpoint/state_dict_loader.py",))
DCP_HINT = ("torch.distributed.checkpoint's save and load are collectives: every rank calls them, each writing or"
            " reading its own part, so a save that only rank 0 makes (the habit torch.save taught) waits for the"
            " others; call dcp.save on every rank, or save a full state dict with torch.save on rank 0 alone")
# The calls that are collectives without looking like one (a forward pass, a checkpoint's save):
# how the record names them, the frames of them in a traceback, and what to tell a user whose
# ranks part at one that only some of them made.
COLLECTIVES_MADE_ALONE = ((DDP_BUFFERS, DDP_FORWARD_FRAMES, DDP_FORWARD_HINT),
                          (FSDP_PARAMETERS, FSDP_FORWARD_FRAMES, FSDP_FORWARD_HINT),
                          (IN_DCP, DCP_FRAMES, DCP_HINT))

THREAD_ENDED_HINT = ("a thread that ends with an error ends alone: Python prints its traceback and the rest of the"
                     " process goes on, so a main thread that waits for it (a queue it was to fill, its join) waits"
                     " for ever, and the other ranks for it until their collectives time out; catch the error in"
                     " the thread and hand it to the main thread (put it on the queue and raise it there), or run"
                     " the work in a concurrent.futures.ThreadPoolExecutor, whose result() raises the thread's error")

# Where a rank's main thread waits for another of its threads and no other thread of the script's
# is alive: why, not its place alone.
THREAD_ALONE_HINT = ("{ranks} {waits} at {where} for another thread (a lock, a queue, an event), and no other"
                     " thread of the script's is alive there to answer: a threading.Lock taken again by the thread"
                     " that holds it waits for ever (a threading.RLock may be taken again by its holder), as does a"
                     " wait for a thread that ended without letting go of its lock, or setting or putting what the"
                     " main thread waits for")

# Where a hung rank's DataLoader worker waits at a lock its dataset's own line takes: why, not its place alone,
# nor DataLoader(timeout=S), which only ends the wait.
FORKED_LOCK_HINT = ("{workers} {waits} at a lock in the dataset ({where}): a DataLoader worker is a fork of its rank"
                    " with only the thread that forked it, so a lock that another thread of the rank held at the fork"
                    " stays taken in the worker for ever; make the lock in each worker (worker_init_fn), keep the"
                    " threads that take it out of a rank that forks workers, or start them with"
                    " DataLoader(multiprocessing_context='spawn')")

NO_TERMINAL = " no terminal came"  # a rank in its debugger that no `debug RUN RANK` reached
DEBUGGER_HINT = "debug it with python -m orchestrate debug {run} {rank}, or {instead}"
# What else ends the wait: by the call that stopped the rank (the rest are its script's breakpoints).
INSTEAD_OF_DEBUGGING = {POST_MORTEM_CALL: "run without --pdb",
                        USER_POST_MORTEM_CALL: f"take the {USER_POST_MORTEM_CALL} call out"}
BREAKPOINT_OUT = "take the breakpoint out"
PEERS_WAIT = "the others wait for it in their collectives; "  # where a rank does
IDLE = "neither computing nor in a recorded collective"  # an idle rank's detail, then its share of a core
LOADING_DATA = "loading data"  # a busy rank's detail: its DataLoader's workers compute, it waits for them
FIRST_DIVERGENCE = "first divergence: "  # the line of a diagnosis that says where the ranks' collectives part
MOVING_DATA = "moving data"  # a busy rank's detail: its sockets move its collective's data
LOADER_TIMEOUT_HINT = "DataLoader(timeout=S) makes that wait fail after S s"


def loader_lines(rank: int, workers: list[LoaderSnapshot], hung: bool) -> list[str]:
    """What a rank waiting for its DataLoader waits for: each of its worker processes' place (the
    busy ones' innermost frames too), or why they cannot be shown; how to make the wait fail, when
    the job is hung."""
    if not workers:
        return [f"{ranks_text([rank])} waits for its DataLoader's worker processes (num_workers > 0), which did not"
                " answer (started by spawn or forkserver, holding the GIL, or started after the request): one is"
                f" stuck in the dataset (a lock, a read that never returns) or slow; {LOADER_TIMEOUT_HINT}"]
    hint = f"; {LOADER_TIMEOUT_HINT}" if hung else ""
    out = [f"{ranks_text([rank])} waits for its DataLoader's worker processes{hint}:"]
    for worker in workers:
        out.append(f"  {loader_name(worker, workers)}: {loader_place(worker)}")
        if worker.idle:
            continue
        out += [f"      {line}" for line in shown_frames(worker.stack)]
    return out


def loader_place(worker: LoaderSnapshot) -> str:
    return "idle, waits for the indices of its next batch" if worker.idle else summary(worker.stack)


def loading_where(workers: list[LoaderSnapshot], whose: str = "its") -> str:
    """Where a rank's first DataLoader worker with a batch to load is ("" when all are idle)."""
    worker = next((w for w in workers if not w.idle), None)
    if worker is None:
        return ""
    return f", for {whose} DataLoader's {loader_name(worker, workers)}: {summary(worker.stack)}"


def loader_name(worker: LoaderSnapshot, workers: list[LoaderSnapshot]) -> str:
    """``worker 1 (pid 18)``; ``worker 0 of DataLoader 2 (pid 20)`` where the rank has several
    (numbered oldest first, as ``workers`` is ordered); ``worker (pid 18)`` where its id is not
    known yet."""
    which = f"worker {worker.worker}" if worker.worker is not None else "worker"
    loaders = list(dict.fromkeys(w.loader for w in workers))
    if len(loaders) > 1:
        which += f" of DataLoader {loaders.index(worker.loader) + 1}"
    return f"{which} (pid {worker.pid})"


def loader_shares(rank: int, before: Optional[Probe], now: Probe, interval_s: float) -> list[tuple[LoaderSnapshot, float]]:
    """Each of a rank's DataLoader workers with the share of a core it used between two probes."""
    earlier = {w.pid: w for w in (before.loaders.get(rank, []) if before is not None else [])}
    out = []
    for worker in now.loaders.get(rank, []):
        past = earlier.get(worker.pid)
        share = (worker.cpu_s - past.cpu_s) / interval_s if past is not None and interval_s > 0 else 0.0
        out.append((worker, share))
    return out


@dataclass(frozen=True)
class RankActivity:
    """What one rank was doing between two probes."""

    rank: int
    state: str  # "collective" (waits in one), "busy" (computing, or moving a collective's data), "idle" (neither),
    # "debugger" (stopped in its debugger: its script's breakpoint()), "stopped", "exited", "absent"
    detail: str = ""
    stopped_by: str = ""  # what stopped a rank in its debugger (its call, or run --pdb's post-mortem)


def activity(rank: int, before: Optional[RankSnapshot], now: Optional[RankSnapshot], interval_s: float,
             absent_why: dict[int, str], loaders: tuple[tuple[LoaderSnapshot, float], ...],
             diverged: bool, least_share: float = BUSY_CPU_SHARE) -> RankActivity:
    """A rank's activity from its snapshots of two probes (``before`` may be missing); ``loaders``:
    its DataLoader's workers, each with the share of a core it used meanwhile; ``diverged``: the
    ranks' records part (see :func:`gpu_waits`); ``least_share``: the share of a core that is
    computing outside a collective (see :func:`least_busy_share`)."""
    if now is None:
        why = absent_why.get(rank, "did not answer")
        if why.startswith(EXITED):
            return RankActivity(rank, "exited", why)
        return RankActivity(rank, "stopped" if "stopped" in why or "paused" in why else "absent", why)
    if now.debugger is not None:
        stop = now.debugger
        return RankActivity(rank, "debugger", f"stopped in its debugger at {stop.where} ({stop.text or stop.call}),"
                                              + (" a terminal debugs it" if stop.attached else NO_TERMINAL), stop.call)
    share = cpu_share(before, now, interval_s)
    collective = now.in_collective
    if collective is not None and collective.on_gpu:  # the CPU's share is CUDA's wait spinning, or other work
        if gpu_waits(now, diverged):
            return RankActivity(rank, "collective", f"waits in {collective.where}, on the GPU")
        return RankActivity(rank, "busy", f"computing on the GPU, in {collective.where}")
    moving = socket_rate(before, now, interval_s)
    if collective is not None and moving >= MOVING_BYTES_PER_S:
        return RankActivity(rank, "busy", f"{MOVING_DATA} in {collective.where} ({format_byte_rate(moving)})")
    # a DDP backward pass computes the gradients it all-reduces: busy there is computing
    if collective is not None and not (collective.is_backward_pass and share >= BUSY_CPU_SHARE):
        return RankActivity(rank, "collective", f"waits in {collective.where}")
    behind = now.gpu_behind
    if behind is not None:
        return RankActivity(rank, "busy", f"computing on the GPU, before {behind.where}")
    if share >= least_share:
        return RankActivity(rank, "busy", f"computing ({share:.0%} of a core)")
    if stack_moved(before, now):
        return RankActivity(rank, "busy", f"computing: its stack moved between the looks ({share:.1%} of a core)")
    loading = [(worker, used) for worker, used in loaders if used >= BUSY_CPU_SHARE]
    if now.waits_for_data_loader and loading:
        worker, used = max(loading, key=lambda pair: pair[1])
        return RankActivity(rank, "busy", f"{LOADING_DATA}: its DataLoader's {loader_name(worker, [w for w, _ in loaders])} computes"
                                          f" ({used:.0%} of a core) at {summary(worker.stack)}")
    children = children_share(before, now, interval_s)
    if children >= BUSY_CPU_SHARE:
        return RankActivity(rank, "busy", f"computing in its child processes ({children:.0%} of a core) while it"
                                          f" waits at {summary(now.stack)}")
    return RankActivity(rank, "idle", f"{IDLE} ({share:.1%} of a core)")


def waits_on_peers(snapshot: RankSnapshot) -> bool:
    """Whether a rank waits on other ranks: in a collective, in init_process_group, or in a store
    call of its script's."""
    return (snapshot.in_collective is not None or summary(snapshot.stack).startswith("init_process_group ")
            or bool(snapshot.store is not None and snapshot.store.waiting))


def least_busy_share(now: Probe) -> float:
    """The share of a core that is computing for a rank outside a collective: BUSY_CPU_SHARE where
    a rank waits on others (its wait may spin a little), SLOW_CPU_SHARE where none does (a crowded
    host gives a computing rank only a few percent, and a slow job is no hang)."""
    if any(waits_on_peers(snapshot) for snapshot in now.snapshots.values()):
        return BUSY_CPU_SHARE
    return SLOW_CPU_SHARE


def stack_moved(before: Optional[RankSnapshot], now: RankSnapshot) -> bool:
    """Whether one process's main thread is elsewhere than at the look before, outside any wait on
    other ranks: it runs (an import, a model's construction), however little CPU a crowded host
    gives it. A rank asleep, at a lock or in input() shows one stack at every look."""
    if before is None or before.pid != now.pid or waits_on_peers(now) or waits_on_peers(before):
        return False
    return bool(before.stack) and bool(now.stack) and before.stack != now.stack


def gpu_waits(snapshot: RankSnapshot, diverged: bool) -> bool:
    """Whether a rank's GPU is in a collective in a way that means it waits: reached and not
    finished. Its CPU time then says nothing: CUDA spins while the main thread waits for the GPU
    (``loss.item()``). DDP's backward pass counts only where the ranks' records part (``diverged``):
    until then its GPU may be computing the gradients."""
    running = snapshot.gpu_in
    return running is not None and (diverged or not running.is_backward_pass)


def cpu_share(before: Optional[RankSnapshot], now: RankSnapshot, interval_s: float) -> float:
    """The share of a core one process used between two snapshots (0 when they are not of one
    process, or no time passed); with no earlier one, the share it used over its own last looks
    (about 2 s; 0 where it does not say)."""
    if before is None:
        return now.cpu_recent or 0.0
    if before.pid != now.pid or interval_s <= 0:
        return 0.0
    return (now.cpu_s - before.cpu_s) / interval_s


def socket_rate(before: Optional[RankSnapshot], now: RankSnapshot, interval_s: float) -> float:
    """The bytes a second one process's TCP sockets moved between two snapshots (0 when they are
    not of one process, either did not count, or no time passed; a socket that closed meanwhile
    takes its bytes out of the count, which is never taken below 0)."""
    if before is None or before.pid != now.pid or interval_s <= 0:
        return 0.0
    if before.socket_bytes is None or now.socket_bytes is None:
        return 0.0
    return max(0.0, (now.socket_bytes - before.socket_bytes) / interval_s)


def children_share(before: Optional[RankSnapshot], now: RankSnapshot, interval_s: float) -> float:
    """The share of a core a rank's child processes used between two snapshots, where its main
    thread waits for them in the standard library (a pool's map, a subprocess's end) and in no
    collective: 0 otherwise (a helper process of its own, a logger's, spins on while the rank
    deadlocks; a DataLoader's workers prefetch on while it waits in a collective), or where they
    are not of one process."""
    if before is None or before.pid != now.pid or interval_s <= 0:
        return 0.0
    if now.in_collective is not None or not now.waits_for_children:
        return 0.0
    return max(0.0, (now.children_cpu_s - before.children_cpu_s) / interval_s)


COMPLETING = "collectives completing"  # the progress of ranks that finished a collective between the looks


def progressed(before: Probe, now: Probe, diverged: bool) -> bool:
    """Whether any rank made progress between the probes (see :func:`progress_made`)."""
    return bool(progress_made(before, now, diverged))


def progress_made(before: Probe, now: Probe, diverged: bool) -> str:
    """What progress a rank made between the probes ("" for none): it finished a collective, or
    computed; its GPU too: a GPU that moved on through the collectives queued on it, or that
    computes before them. A rank whose GPU waits in a collective all that time did not compute,
    whatever CPU it used (:func:`gpu_waits`; ``diverged``: the ranks' records part). A rank that
    did not answer the earlier probe is judged by its own recent CPU (no answer is no progress)."""
    interval = max(now.at - before.at, 1e-6)
    least = least_busy_share(now)
    for rank, snapshot in sorted(now.snapshots.items()):
        earlier = before.snapshots.get(rank)
        who = ranks_text([rank])
        if earlier is not None and earlier.pid != snapshot.pid:
            return f"{who} restarted"  # another process in its place: that is progress
        if earlier is not None and snapshot.completed > earlier.completed:
            return COMPLETING
        if earlier is not None and snapshot.gpu_states != earlier.gpu_states:
            return f"{who}'s GPU moving on through its collectives"
        # past here its GPU is where it was at the look before
        share = cpu_share(earlier, snapshot, interval)
        if not gpu_waits(snapshot, diverged) and share >= least:
            return f"{who} computing ({share:.0%} of a core)"
        if stack_moved(earlier, snapshot):
            return f"{who} computing (its stack moved between the looks)"
        if snapshot.waits_for_data_loader and any(used >= BUSY_CPU_SHARE for _, used in
                                                  loader_shares(rank, before, now, interval)):
            return f"{who} {LOADING_DATA}"  # its DataLoader's workers compute its next batch
        if not gpu_waits(snapshot, diverged) and children_share(earlier, snapshot, interval) >= BUSY_CPU_SHARE:
            return f"{who} computing in its child processes"  # a pool's map, a subprocess
        collective = snapshot.in_collective
        if (collective is not None and not collective.on_gpu
                and socket_rate(earlier, snapshot, interval) >= MOVING_BYTES_PER_S):
            return f"{who} {MOVING_DATA}"  # its collective moves its data (a large buffer over a slow link)
    return ""


# How many of each rank's last collectives a diagnosis keeps to show (its record keeps more: what
# reads further back, the groups made, reads the record).
COLLECTIVES_SHOWN = 8


@dataclass
class HangDiagnosis:
    """Where every rank is and why the job makes no progress.

    Attributes:
        quiet_s: Seconds without progress when it was made (None: a look on demand, ``stacks``,
            which knows no such time).
        groups: The ranks grouped by their main thread's stack, odd ones out first.
        collectives: Each rank's last collectives (oldest first).
        divergence: The first place their collectives part, if found.
        activities: What each rank was doing.
        hung: No rank made progress between the probes (else: they are working, quietly).
        cause: What ended the run, when it did ("no progress for 20 s", "a collective timed out").
        loaders: The DataLoader worker processes of each rank that waits for its DataLoader.
        unheard_nodes: Where the rendezvous numbers the ranks (elastic), a line for each node
            fewer of whose ranks answered than it runs, with why: their numbers are not known.
        awaited_threads: For each rank whose main thread waits for another of its threads (a
            queue's get, a join, a lock), where its threads of the user's are.
        awaits_ended_thread: The ranks among those one of whose threads ended with an error.
        awaits_no_thread: The ranks whose main thread waits for another of its threads while none
            of the script's is alive (a lock taken again by its holder), each with where it waits.
    """

    quiet_s: Optional[float]
    groups: list[StackGroup]
    collectives: dict[int, list[dict[str, Any]]]
    divergence: Optional[Divergence]
    activities: list[RankActivity] = field(default_factory=list)
    hung: bool = True
    cause: str = ""
    loaders: dict[int, list[LoaderSnapshot]] = field(default_factory=dict)
    unheard_nodes: list[str] = field(default_factory=list)
    call_lines: dict[int, dict[str, int]] = field(default_factory=dict)  # each rank's call lines, with counts
    backward_passes: dict[int, dict[str, int]] = field(default_factory=dict)  # each rank's backward passes, by line
    init_hints: list[str] = field(default_factory=list)  # what is wrong with the init_process_group calls waited in
    store_hints: list[str] = field(default_factory=list)  # why ranks wait in their script's own store calls
    timed_out: bool = False  # a collective's (or init_process_group's) timeout ended the run: the cause says where
    store_timed_out: bool = False  # what timed out was a store call of the script's own
    run_id: str = ""  # the run looked at: a rank in its debugger is named with the command that reaches it
    collective_timeout_s: Optional[float] = None  # the run's --collective-timeout (None: not set, or not known)
    awaited_threads: dict[int, str] = field(default_factory=dict)  # where a waiting main thread's threads are
    awaits_ended_thread: tuple[int, ...] = ()  # the ranks among them one of whose threads ended with an error
    awaits_no_thread: dict[int, str] = field(default_factory=dict)  # waits for a thread, none alive: where
    cut_by: tuple[str, ...] = ()  # the faults in effect that cut the nodes' network (a partition, a disconnect)
    collectives_checked: bool = False  # the ranks run under torch's check of every collective (--debug-collectives)
    said: bool = False  # its lines were said as the run went (the watchdog's verdict): the summary's need not repeat
    # each rank's new_group calls in all its record (the KEEP last), where ``collectives`` shows the last few
    groups_made: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    progress: str = ""  # the first progress found between the looks ("rank 1 restarted"; "": none, or not known)

    @property
    def headline(self) -> str:
        """One line: what is wrong, or what the ranks are doing."""
        if not self.hung:
            doing = self.doing
            if self.timed_out:  # a collective's timeout ended it while a rank worked
                return f"{self.cause} as the job still worked: {doing}"
            if self.quiet_s is None:
                return f"the job is working: {doing}"
            return f"no output for {self.quiet_s:.0f} s, but the job is working: {doing}"
        quiet = "" if self.quiet_s is None else f" for {self.quiet_s:.0f} s"
        cause = self.cause or f"no progress{quiet}"
        where = self.divergence.text if self.divergence else self.where_they_wait()
        where += f"; {self.cut_note}" if self.cut_note and where else ""
        where += f"; {self.idle_note}" if self.idle_note and where else ""
        return f"{cause}: {where}" if where else cause

    @property
    def idle_note(self) -> str:
        """Where no rank waits on another, why the idle ranks are hung: neither computing (with the
        share of a core each used) nor in a collective, so that a hang reads apart from a crowded
        host's slow ranks ("" where a rank waits on others: the place says why; a rank that waits
        for its threads or its DataLoader is left out: its place says for what)."""
        if self.divergence is not None or self.someone_waits or any(store for store in self.store_hints):
            return ""
        explained = self.awaited_threads.keys() | self.awaits_no_thread.keys() | self.loaders.keys()
        idle = alike({a.rank: a.detail.removeprefix(IDLE) for a in self.activities
                      if a.state == "idle" and a.rank not in explained})
        return "; ".join(f"{ranks_text(ranks)} idle: neither computing nor in a collective{share}"
                         for ranks, share in idle)

    @property
    def cut_note(self) -> str:
        """That faults of the run cut the network the ranks wait across ("" when none does, or no
        rank waits for another)."""
        if not self.cut_by or not self.someone_waits:
            return ""
        return f"{faults_text(self.cut_by)} {'cut' if len(self.cut_by) > 1 else 'cuts'} the nodes' network"

    @property
    def doing(self) -> str:
        """What the ranks that work do ("rank 1 computing, rank 3 loading data"), or else the
        progress found between the looks (collectives completing, a rank restarted)."""
        busy = [a for a in self.activities if a.state == "busy"]
        loading = [a.rank for a in busy if a.detail.startswith(LOADING_DATA)]
        moving = [a.rank for a in busy if a.detail.startswith(MOVING_DATA)]
        computing = [a.rank for a in busy if a.rank not in loading and a.rank not in moving]
        return ", ".join([f"{ranks_text(computing)} computing"] * bool(computing)
                         + [f"{ranks_text(loading)} loading data"] * bool(loading)
                         + [f"{ranks_text(moving)} {MOVING_DATA}"] * bool(moving)) or self.progress or COMPLETING

    def where_they_wait(self) -> str:
        not_joined = set(self.not_joined)
        waits = [f"{ranks_text(g.ranks)}: " + (f"{NOT_JOINED} ({g.where})" if set(g.ranks) & not_joined else g.where)
                 + (self.group_loading_where(g.ranks) or self.group_threads_where(g.ranks)) for g in self.groups[:3]]
        exited = [f"{ranks_text(self.exited)}: exited"] if self.exited else []
        return "; ".join(waits + exited)

    @property
    def someone_waits(self) -> bool:
        """Whether a rank that answered waits for the others: in a collective, or in
        init_process_group."""
        return (any(a.state == "collective" for a in self.activities)
                or any(in_init(g) for g in self.groups))

    @property
    def not_joined(self) -> tuple[int, ...]:
        """While some ranks wait in init_process_group, the ranks that answered from elsewhere,
        idle, and made no collective: they have not called it, and the others wait for them."""
        if not any(in_init(g) for g in self.groups):
            return ()
        elsewhere = {rank for g in self.groups if not in_init(g) for rank in g.ranks}
        return tuple(a.rank for a in self.activities
                     if a.rank in elsewhere and a.state == "idle" and not self.collectives.get(a.rank))

    @property
    def exited(self) -> tuple[int, ...]:
        """The ranks whose worker process exited while their node ran on."""
        return tuple(a.rank for a in self.activities if a.state == "exited")

    @property
    def waiting_in(self) -> dict[int, dict[str, Any]]:
        """Each rank's last collective, where the rank waits in it (on a GPU: the GPU is in it) or
        waited until it failed (a timeout)."""
        return {rank: entries[-1] for rank, entries in self.collectives.items()
                if entries and entries[-1].get("state") in ("entered", "running", "failed")}

    @property
    def made_alone(self) -> str:
        """The hint for a hung job whose ranks part at a call that is a collective without looking
        like one (a DDP model's forward pass, broadcasting its buffers; an FSDP model's, gathering
        its parameters; a checkpoint's save or load) and that only some ranks make ("" for any
        other): a rank waits in one (on a GPU: the GPU is in it) from a line that no other rank's
        record has such a call from, nor its own before (a training step's forward pass repeats
        its line on every rank; an evaluation or a save on rank 0 alone does not), while the others
        are elsewhere (in another collective, or exited; a rank that did not answer for another
        reason, stopped or paused, is no other rank)."""
        if not self.hung:
            return ""
        for marker, _, hint in COLLECTIVES_MADE_ALONE:
            if self.parted_at(marker):
                return hint
        return ""

    def parted_at(self, marker: str) -> bool:
        """Whether a rank waits in a collective whose record starts ``marker`` from a line no
        other rank's record, nor its own before, has one from (see :attr:`made_alone`): its last
        entries, and past them the lines each rank counted (a deep FSDP model's step is more
        entries than are kept)."""
        waiting = {rank: entry for rank, entry in self.waiting_in.items()
                   if str(entry.get("shapes", "")).startswith(marker)}
        if not waiting or (len(waiting) == len(self.collectives) and not self.exited):
            return False

        def forward_lines(entries: list[dict[str, Any]]) -> set[str]:
            return {str(e.get("at")) for e in entries if str(e.get("shapes", "")).startswith(marker)}

        def made_before(rank: int, line: str) -> bool:  # past the entries kept: the rank's line counts
            return self.call_lines.get(rank, {}).get(line, 0) > 1

        others = set().union(*(forward_lines(entries) | set(self.call_lines.get(rank, {}))
                               for rank, entries in self.collectives.items() if rank not in waiting))
        return any(entry.get("at") not in others | forward_lines(self.collectives[rank][:-1])
                   and not made_before(rank, str(entry.get("at"))) for rank, entry in waiting.items())

    @property
    def waits_elsewhere(self) -> str:
        """Where a mismatch is not where the ranks wait (some went on past it): where each waits
        now, ranks in the same call together (``now rank 0 waits in new_group(ranks 0,1) #3 at
        t.py:14; ranks 1, 2 wait in ...``); "" otherwise, or where no rank waits in a collective.
        Their stacks alone can read alike: four ranks in new_group at one line, each in another."""
        divergence = self.divergence
        if divergence is None or divergence.kind != "mismatch":
            return ""
        if all((entry.get("group"), entry.get("seq")) == (divergence.group, divergence.seq)
               for entry in self.waiting_in.values()):
            return ""
        places = alike({a.rank: a.detail.removeprefix("waits in ") for a in self.activities if a.state == "collective"})
        return "now " + "; ".join(f"{ranks_text(ranks)} {'waits' if len(ranks) == 1 else 'wait'} in {place}"
                                  for ranks, place in places) if places else ""

    @property
    def parted_mid_training(self) -> bool:
        """Whether the divergence's hint is that the ranks took different numbers of steps."""
        return self.divergence is not None and UNEVEN_HINT in self.divergence.hint

    @property
    def left_mid_training(self) -> str:
        """For ranks that exited while every rank that waits is in a DDP model's training step:
        that the ranks took different numbers of steps, with how many, where the records say
        ("" otherwise)."""
        waiting = {rank: entry for rank, entry in self.waiting_in.items() if rank not in self.exited}
        # the ranks that exited did not answer: no line of theirs is known, so a backward pass alone
        passes = {rank: (str(e.get("at")), training_pass(str(e.get("shapes", "")), others_made_it=False))
                  for rank, e in waiting.items()}
        if not passes or not all(kind for _, kind in passes.values()):
            return ""
        return f"{step_counts(passes, list(self.exited), self.backward_passes)}{UNEVEN_HINT}"

    def group_loading_where(self, ranks: tuple[int, ...]) -> str:
        """Where the first of these ranks' DataLoader workers with a batch to load is."""
        whose = "its" if len(ranks) == 1 else None
        for rank in ranks:
            found = loading_where(self.loaders.get(rank, []), whose or f"rank {rank}'s")
            if found:
                return found
        return ""

    def group_threads_where(self, ranks: tuple[int, ...]) -> str:
        """Where the threads are of the first of these ranks whose main thread waits for its threads."""
        for rank in ranks:
            if rank in self.awaited_threads:
                whose = "its" if len(ranks) == 1 else f"rank {rank}'s"
                return f"; {whose} {self.awaited_threads[rank]}"
        return ""

    def place_lines(self) -> list[str]:
        """The headline and where every rank is: its group of ranks, or stopped, not heard from, busy,
        in a debugger."""
        out = [self.headline]
        stopped = [a for a in self.activities if a.state in SILENT_STATES]
        for group in self.groups:
            out += ["  " + line for line in group.lines()]
        for absent in stopped:
            out.append(f"  rank {absent.rank}: {absent.detail}")
        out += ["  " + line for line in self.unheard_nodes]
        busy = [a for a in self.activities if a.state == "busy"]
        for rank in busy:
            out.append(f"  rank {rank.rank} is {rank.detail}")
        for rank in (a for a in self.activities if a.state == "debugger"):
            instead = INSTEAD_OF_DEBUGGING.get(rank.stopped_by, BREAKPOINT_OUT)
            hint = (PEERS_WAIT if self.someone_waits else "") + DEBUGGER_HINT.format(run=self.run_id or "RUN_ID",
                                                                                      rank=rank.rank, instead=instead)
            out.append(f"  rank {rank.rank} {rank.detail}" + (f": {hint}" if rank.detail.endswith(NO_TERMINAL) else ""))
        return out

    def advice(self) -> list[str]:
        """What :meth:`lines` says past where every rank is and the divergence (``outcome.json``
        keeps that apart): the line a rank skipped a call at, the hints; kept in ``outcome.json``
        and shown on the report page, not in the terminal alone."""
        said = self.lines()
        return [line.strip() for line in said[len(self.place_lines()):len(said) - len(self.loader_part())]
                if not line.startswith(f"  {FIRST_DIVERGENCE}")]

    def lines(self) -> list[str]:
        """The headline, what each group of ranks is doing, the divergence and a hint."""
        out = self.place_lines()
        # a working job's ranks are looked at a moment apart, and its GPUs are in collectives as
        # they go: there only ops or shapes that differ are worth saying
        shown = self.hung or (self.divergence is not None and self.divergence.kind == "mismatch")
        made_alone = self.made_alone
        if self.divergence is not None and self.divergence.kind != "missing" and shown:
            if self.divergence.text not in self.headline:
                out.append(f"  {FIRST_DIVERGENCE}{self.divergence.text}")
            if self.divergence.fewer:  # where they parted is later than where one skipped a call
                out.append(f"  {self.divergence.fewer}")
            waits_now = self.waits_elsewhere
            if waits_now:  # the ranks went on past where they parted: where they wait is said
                out.append(f"  {waits_now}")
            if self.divergence.hint:  # what torch's check does not compare either, or why they part
                if not (made_alone and self.parted_mid_training):  # a call made alone explains the others' step
                    out.append(f"  {self.divergence.hint}")
            elif NEW_GROUP in self.divergence.ops:  # torch's check does not see groups made
                out.append(f"  {new_group_hint(self.divergence, self.groups_made)}")
            elif channel_ends(self.divergence.group) is None and not made_alone:  # it compares no p2p
                out.append(f"  {mismatch_hint(self.divergence, self.collectives_checked)}")
        if not self.hung and self.timed_out:
            hint = STORE_SHORT_TIMEOUT_HINT if self.store_timed_out else short_timeout_hint(self.collective_timeout_s)
            out.append(f"  {hint}")
        if self.hung and self.cut_note:
            out.append("  " + CUT_HINT.format(faults=faults_text(self.cut_by)))
        if made_alone:
            out.append(f"  {made_alone}")
        elif self.hung and self.awaits_ended_thread:
            out.append(f"  {THREAD_ENDED_HINT}")
        elif self.hung and self.awaits_no_thread:
            ranks = sorted(self.awaits_no_thread)
            out.append("  " + THREAD_ALONE_HINT.format(ranks=ranks_text(ranks),
                                                       waits="waits" if len(ranks) == 1 else "wait",
                                                       where=self.awaits_no_thread[ranks[0]]))
        elif self.hung and self.loaders_at_a_lock:
            at_lock = self.loaders_at_a_lock
            workers = "; ".join(f"{ranks_text([rank])}'s DataLoader "
                                + " and ".join(loader_name(w, self.loaders[rank]) for w in waiting)
                                for rank, waiting in at_lock.items())
            first = next(iter(at_lock.values()))[0]
            many = sum(len(waiting) for waiting in at_lock.values()) > 1
            out.append("  " + FORKED_LOCK_HINT.format(workers=workers, waits="wait" if many else "waits",
                                                      where=summary(first.stack)))
        elif self.hung and self.init_hints:
            out += [f"  {hint}" for hint in self.init_hints]
        elif self.hung and self.store_hints:
            out += [f"  {hint}" for hint in self.store_hints]
        elif self.hung and self.not_joined:
            out.append(f"  {NOT_JOINED_HINT}")
        elif self.hung and self.exited and self.someone_waits:
            out.append(f"  {EXITED_HINT if self.parted_mid_training else self.left_mid_training or EXITED_HINT}")
        elif self.hung and self.groups and all(any(f.file.endswith(SPAWN_FILE) for f in g.stack) for g in self.groups):
            out.append(f"  {SPAWN_HINT}")
        elif self.hung and self.groups and all(in_init(g) for g in self.groups) and any(
                a.state == "stopped" for a in self.activities):
            # they wait for a rank that cannot answer (its node paused, its worker stopped): that is
            # why, not where their init_method points
            waiting = ranks_text(sorted(r for g in self.groups for r in g.ranks))
            unable = ranks_text(sorted(a.rank for a in self.activities if a.state == "stopped"))
            out.append(f"  {waiting} {'waits' if waiting.startswith('rank ') else 'wait'} in init_process_group for"
                       f" {unable}, which cannot answer (above): {INIT_AWAITS_ALL}")
        elif self.hung and self.groups and all(in_init(g) for g in self.groups):
            out.append(f"  {INIT_HINT}")
        return out + self.loader_part()

    def loader_part(self) -> list[str]:
        """The DataLoader workers of the ranks that wait for theirs, where each is (hung, or working)."""
        out = []
        for rank in sorted(self.waiting_for_loaders):  # hung, or working: where its workers are
            if self.hung or self.loaders.get(rank):
                out += ["  " + line for line in loader_lines(rank, self.loaders.get(rank, []), self.hung)]
        return out

    def __str__(self) -> str:
        """What ``print(result.hang)`` shows: the summary's lines (:meth:`lines`)."""
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        """What a failed ``assert result.hang is None`` shows: the headline, not every field."""
        return f"HangDiagnosis({'hung' if self.hung else 'not hung'}: {self.headline})"

    @property
    def loaders_at_a_lock(self) -> dict[int, list[LoaderSnapshot]]:
        """The DataLoader workers, of the ranks that wait for theirs, that wait at a lock a line of
        the dataset's own takes, by rank (those with none left out); not a wait in a library's
        threads (a pool the dataset made itself, stuck in its I/O), which the fork does not explain."""
        at_lock = {rank: [worker for worker in self.loaders.get(rank, [])
                          if not worker.idle and waits_at_own_lock(worker.stack)]
                   for rank in sorted(self.waiting_for_loaders)}
        return {rank: workers for rank, workers in at_lock.items() if workers}

    @property
    def waiting_for_loaders(self) -> set[int]:
        """The ranks whose main thread waits for their DataLoader's worker processes."""
        return {rank for g in self.groups if waits_for_data_loader(g.stack) for rank in g.ranks}

    def to_json(self) -> dict[str, Any]:
        return {"headline": self.headline, "hung": self.hung, "quiet_s": self.quiet_s, "cause": self.cause,
                "timed_out": self.timed_out,
                "groups": [{"ranks": list(g.ranks), "where": g.where,
                            "stack": [[f.file, f.line, f.function] for f in g.stack],
                            "threads": [{"name": t.name, "where": t.where, "ranks": list(t.ranks),
                                         "frame": None if t.frame is None else [t.frame.file, t.frame.line,
                                                                                t.frame.function, t.frame.code]}
                                        for t in g.threads]}
                           for g in self.groups],
                "divergence": None if self.divergence is None else self.divergence.text,
                "advice": self.advice(),
                "cut_by": list(self.cut_by),
                "loaders": {str(rank): [{**w.to_json(), "where": loader_place(w)} for w in workers]
                            for rank, workers in self.loaders.items()},
                "activities": [a.__dict__ for a in self.activities], "unheard_nodes": self.unheard_nodes,
                "collectives": {str(rank): entries for rank, entries in self.collectives.items()}}


def short_timeout_hint(collective_timeout_s: Optional[float]) -> str:
    """What to do where the process group's timeout ended the waits of ranks whose peer computed:
    a run that set ``--collective-timeout`` is told its value and a longer one (not of that option
    as if it had not set it); one that did not,
    :data:`SHORT_TIMEOUT_HINT`."""
    if collective_timeout_s is None:
        return SHORT_TIMEOUT_HINT
    return _SHORT_TIMEOUT.format(
        timeout=f", this run's --collective-timeout {collective_timeout_s:g} (where the script gives its process"
                " groups none of their own)",
        longer=f"a --collective-timeout longer than {collective_timeout_s:g} (or init_process_group a longer timeout"
               " of its own)")


def mismatch_hint(divergence: Divergence, checked: bool) -> str:
    """What to do about ranks whose collectives differ, where the records say no more of why:
    make one barrier call everywhere, where it is monitored_barrier against barrier (torch's check
    does not catch that); what the mismatch means, where the ranks already ran under torch's check
    (``checked``: it passed the mismatch by); else, rerun under the check."""
    if divergence.ops == MIXED_BARRIERS:
        return MIXED_BARRIERS_HINT
    return CHECKED_MISSED_HINT if checked else DEBUG_HINT


def new_group_hint(divergence: Divergence, collectives: dict[int, list[dict[str, Any]]]) -> str:
    """Why ranks part at new_group, by their records (``collectives``: each rank's new_group
    entries, all its record keeps: groups made before its last few collectives count too):
    where each group made there is made by ranks of the other side too, later, the ranks make the
    same groups in different orders, and which made which there is said; otherwise groups are
    made on some ranks only (:data:`NEW_GROUP_HINT`)."""
    made_there: dict[str, list[int]] = {}
    made_as: dict[str, dict[int, int]] = {}  # each group made: by which rank, as which call
    for rank, entries in sorted(collectives.items()):
        for entry in entries:
            if entry.get("op") != NEW_GROUP or entry.get("group") != divergence.group:
                continue
            made_as.setdefault(str(entry.get("shapes")), {})[rank] = int(entry.get("seq", 0))
            if entry.get("seq") == divergence.seq:
                made_there.setdefault(str(entry.get("shapes")), []).append(rank)
    if len(made_there) < 2:
        return NEW_GROUP_HINT
    order = []
    for group, ranks in made_there.items():
        later: dict[int, list[int]] = {}
        for rank, seq in made_as[group].items():
            if rank not in ranks:
                later.setdefault(seq, []).append(rank)
        if not later:  # no rank of the other side made it: a group made on some ranks only
            return NEW_GROUP_HINT
        elsewhere = ", ".join(f"{ranks_text(others)} {'makes' if len(others) == 1 else 'make'} as"
                              f" {'its' if len(others) == 1 else 'their'} #{seq}"
                              for seq, others in sorted(later.items()))
        makes = "makes" if len(ranks) == 1 else "make"
        order.append(f"{ranks_text(ranks)} {makes} {NEW_GROUP}({group}), which {elsewhere}")
    return NEW_GROUP_ORDER_HINT.format(order=f"at #{divergence.seq}, " + "; ".join(order))


def faults_text(faults: tuple[str, ...]) -> str:
    """``injected fault partition:node0|node1@step=5`` (pure), or ``injected faults A, B``."""
    return f"injected fault{'s' if len(faults) > 1 else ''} {', '.join(faults)}"


def diagnose(now: Probe, before: Optional[Probe], expected: set[int], absent_why: dict[int, str],
             quiet_s: Optional[float], cause: str = "") -> HangDiagnosis:
    """The diagnosis of the latest probe (``before``: the one some seconds earlier, for who is
    busy); ``absent_why``: why a rank that did not answer cannot (stopped, its node paused)."""
    interval = now.at - before.at if before is not None else 0.0
    ranks = sorted(expected | set(now.snapshots))
    loaders = {rank: list(workers) for rank, workers in now.loaders.items()
               if rank in now.snapshots and now.snapshots[rank].waits_for_data_loader}
    threads = {rank: found for rank, snapshot in now.snapshots.items() if (found := awaited_threads(snapshot))}
    elsewhere = {rank: loading_where(loaders.get(rank, [])) or (f"; its {threads[rank]}" if rank in threads else "")
                 for rank in loaders.keys() | threads.keys()}
    divergence = first_divergence(now.snapshots, expected, absent_why, elsewhere)
    diverged = divergence is not None
    groups = group_stacks(now.snapshots)
    joining = {rank for g in groups if in_init(g) for rank in g.ranks}
    least = least_busy_share(now)
    activities = [activity(rank, before.snapshots.get(rank) if before else None, now.snapshots.get(rank), interval,
                           absent_why, tuple(loader_shares(rank, before, now, interval)), diverged, least)
                  for rank in ranks]
    progress = progress_made(before, now, diverged) if before is not None else ""
    return HangDiagnosis(
        quiet_s=quiet_s,
        groups=groups,
        collectives={rank: [c.__dict__ for c in s.collectives[-COLLECTIVES_SHOWN:]]
                     for rank, s in sorted(now.snapshots.items())},
        groups_made={rank: [c.__dict__ for c in s.collectives if c.op == NEW_GROUP]
                     for rank, s in sorted(now.snapshots.items())},
        divergence=divergence,
        activities=activities,
        hung=not progress,
        progress=progress,
        cause=cause,
        loaders=loaders,
        call_lines={rank: dict(s.lines) for rank, s in now.snapshots.items()},
        backward_passes={rank: s.passes_made(BACKWARD_PASS) for rank, s in now.snapshots.items()},
        init_hints=init_hints({rank: call for rank in joining if (call := now.snapshots[rank].init) is not None},
                              {rank: s.node for rank, s in now.snapshots.items()}),
        store_hints=store_hints(now.snapshots, expected),
        awaited_threads=threads,
        awaits_no_thread={rank: summary(snapshot.stack) for rank, snapshot in sorted(now.snapshots.items())
                          if snapshot.waits_for_threads and not snapshot.threads},
        awaits_ended_thread=tuple(sorted(rank for rank in threads
                                         if any(t.error for t in now.snapshots[rank].threads))),
        collectives_checked=any(s.collectives_checked for s in now.snapshots.values()),
    )


# How torch says a collective waited past the process group's timeout (gloo, NCCL's watchdog).
_TIMED_OUT = re.compile(r"timed out|timeout", re.I)
# How gloo says it could not connect to a peer as the process group formed (its connect retries
# "timed out", but the peer refused: it was gone, or not yet listening).
_NO_PEER_TO_CONNECT = re.compile(r"timed out connecting: SO_ERROR: Connection refused")
# gloo's and NCCL's messages start with their source file: "[/pytorch/.../unbound_buffer.cc:78] ".
_SOURCE_PREFIX = re.compile(r"^\[[^\]]*\]\s*")


def timeout_diagnosis(failure: Any, directory: Path, expected: set[int], since: Optional[float] = None,
                      stopped_where: Optional[dict[int, str]] = None) -> Optional[HangDiagnosis]:
    """A run that failed because a collective timed out, or a store call of the script's own (a
    ``get`` or ``wait`` past its store's timeout, shorter than ``--hang-timeout``: its store hint
    then said as a hang's), is a hang that torch ended: its diagnosis from the snapshots the
    ranks wrote as their calls failed, and those written from ``since`` on (Unix seconds: the
    answers of ranks asked where they were as the failure ended the job, which wrote no record
    of their own: one computing outside any collective); a rank that neither wrote nor answered
    is placed by where SIGTERM found it (``stopped_where``, by rank). None when the failure is
    something else, or no rank's call failed."""
    exception = getattr(failure, "exception", "") or ""
    if getattr(failure, "reason", "") or not _TIMED_OUT.search(exception):
        return None  # a node that stopped answering (or was OOM-killed) explains it better
    if _NO_PEER_TO_CONNECT.search(exception):
        return None  # gloo gave up reaching a peer that was not there: no wait of a collective
    latest = last_snapshots(directory)
    failed = {rank: s for rank, s in latest.items() if s.reason in (FAILED_REASON, STORE_FAILED_REASON)}
    if not failed:
        return None
    snapshots = failed
    if since is not None:
        snapshots = {**{rank: s for rank, s in latest.items() if s.time >= since}, **failed}
    probe = Probe("failed", 0.0, snapshots)
    where = f"{failure.node} rank {failure.rank}" if getattr(failure, "rank", None) is not None else failure.node
    said = _SOURCE_PREFIX.sub("", exception.split(": ", 1)[-1]).strip()
    what, in_store_call = what_timed_out(failed, getattr(failure, "rank", None))
    # (said only of the ranks that neither wrote nor answered)
    unheard = {rank: f"did not answer, and was in {place} when torchrun ended it"
               for rank, place in (stopped_where or {}).items()}
    found = diagnose(probe, None, expected or set(snapshots), unheard, 0.0,
                     cause=f"{what} timed out on {where} ({said[:120]})")
    found.timed_out = True
    found.store_timed_out = in_store_call
    # a rank that was computing as the others' wait timed out (by its own recent CPU): the timeout
    # is shorter than its work, and the job was not hung
    found.hung = not any(a.state == "busy" for a in found.activities)
    return found


def what_timed_out(failed: dict[int, RankSnapshot], rank: Optional[int]) -> tuple[str, bool]:
    """What timed out, by the records the ranks wrote as their calls failed (the failing rank's
    first): a store call of the script's own, init_process_group, or a collective; and whether it
    was a store call of the script's own."""
    own = failed.get(rank) if rank is not None else None
    record = own if own is not None else next(iter(failed.values()))
    store_call = record.failed_in_store_call
    if store_call is not None:
        called = "TCPStore" if store_call.call == "TCPStore" else f"store.{store_call.call}()"
        return f"the script's {called}", True
    collective_records = [s for s in failed.values() if s.reason == FAILED_REASON]
    if not collective_records:
        return "the script's store call", True
    return ("init_process_group" if all(s.failed_in_init for s in collective_records) else "a collective"), False


@dataclass
class FailurePlace:
    """Where the ranks were as a job failed, by the records the workers' hook wrote in its latest
    attempt: where torchrun's SIGTERM found each (by rank), the hang torch ended where a
    collective timed out, and where the ranks' collectives part ("" where nothing says); where
    torch's check caught them and their records show a call one rank skipped, that skip (``rank 1
    made 3 barrier() calls at t.py:23 where rank 0 made 4: ...``), the line to look at."""

    stopped_where: dict[int, str]
    timed_out: Optional[HangDiagnosis]
    divergence: str
    skipped: str = ""
    collectives_checked: bool = False  # a rank's record of the attempt says it ran under torch's check


def place_failure(failure: Any, directory: Path, ranks: set[int], attempt_began: float,
                  asked_since: Optional[float] = None) -> FailurePlace:
    """Place ``failure`` by the records in ``directory`` written since ``attempt_began`` (Unix
    seconds), for a Compose run's result and a Slurm job's alike; ``asked_since``: when the
    ranks were asked where they were as the failure ended the job (see
    :func:`timeout_diagnosis`)."""
    stopped_where = {rank: where for rank in sorted(ranks)
                     if (where := where_stopped(directory, rank, attempt_began - ATTEMPT_CLOCK_SLACK_S))}
    checked = checked_mismatch(failure, directory, attempt_began)
    under_check = any(s.collectives_checked for s in last_snapshots(directory).values()
                      if s.time >= attempt_began - ATTEMPT_CLOCK_SLACK_S)
    return FailurePlace(stopped_where,
                        timeout_diagnosis(failure, directory, ranks, since=asked_since, stopped_where=stopped_where),
                        mismatch_divergence(failure, directory, attempt_began),
                        skipped=checked.fewer if checked is not None else "", collectives_checked=under_check)


def checked_mismatch(failure: Any, directory: Path, since: float = 0.0) -> Optional[Divergence]:
    """For a run that torch's check (``--debug-collectives``) failed on collectives that differ:
    the ranks' first mismatch by the records they wrote as their collectives failed, from ``since``
    on (see :func:`mismatch_divergence`); None for any other failure, or where they show none."""
    if not any(words in (getattr(failure, "exception", "") or "") for words in CHECKED_MISMATCH):
        return None
    snapshots = {r: s for r, s in last_snapshots(directory).items()
                 if s.reason == FAILED_REASON and s.time >= since - ATTEMPT_CLOCK_SLACK_S}
    found = first_divergence(snapshots)  # (one rank's record alone shows no mismatch)
    return found if found is not None and found.kind == "mismatch" else None


def mismatch_divergence(failure: Any, directory: Path, since: float = 0.0) -> str:
    """For a run that failed on a collective mismatch: where the ranks' collectives part, with
    the call sites the error lacks ("" when the failure is something else, or the records do not
    show it). Caught by torch's check (``--debug-collectives``): by the records the ranks wrote as
    their collectives failed. Caught by gloo (the rank aborted): see :func:`aborted_mismatch`.
    Caught by nobody (gloo matched different collectives or sizes, some ranks went on, the others
    then lost them or timed out): the records the failing ranks wrote, where the rank the failure
    names is among them and two made the same collective with other ops or tensors. Records
    written before ``since`` (the epoch time the latest attempt began) are an earlier attempt's,
    and left out."""
    exception = getattr(failure, "exception", "") or ""
    rank = getattr(failure, "rank", None)
    snapshots = {r: s for r, s in last_snapshots(directory).items()
                 if s.reason == FAILED_REASON and s.time >= since - ATTEMPT_CLOCK_SLACK_S}
    if GLOO_MISMATCH in exception and rank is not None:
        return aborted_mismatch(rank, snapshots, directory)
    if any(words in exception for words in CHECKED_MISMATCH):
        checked = checked_mismatch(failure, directory, since)
        return checked.text if checked is not None else ""
    # Otherwise gloo matched what it was given (it checks neither the op nor the sizes), and the
    # ranks failed later, on a lost peer or a timeout: where the failing rank's own collective
    # failed, the records of those that failed so still say they differed.
    found = mismatch(snapshots) if rank in snapshots else None
    # (not where the records say why they part otherwise: roots that differ, uneven steps)
    return found.text if found is not None and not found.hint else ""


def aborted_mismatch(rank: int, snapshots: dict[int, RankSnapshot], directory: Path) -> str:
    """gloo aborts the rank that received more data than its collective expected, and the rank's
    record dies with it: where it was by its crash stack, beside where its peers were by the
    collectives they failed in as it went (``snapshots``: the records written as collectives
    failed): "rank 0 aborted in all_reduce at train.py:23; rank 1 was in all_reduce(float32[8]) #5
    at train.py:20"; "" when no peer's record shows one."""
    peers = {other: s.in_collective for other, s in sorted(snapshots.items())
             if other != rank and s.in_collective is not None}
    if not peers:
        return ""
    dump = rank_dump(directory, rank)
    found = dump.script_thread() if dump is not None else None
    own = f"rank {rank} aborted in {found[1]}" if found else f"rank {rank} aborted"
    # peers in one call at one place together: ``ranks 1-3 were in ...``, not one by one
    places = alike({other: f"{c.call} #{c.seq}{'' if c.group == 'default' else ' of group ' + c.group} at {c.at}"
                    for other, c in peers.items()})
    theirs = [f"{ranks_text(ranks)} {'was' if len(ranks) == 1 else 'were'} in {place}" for ranks, place in places[:3]]
    rest = sum(len(ranks) for ranks, _ in places[3:])
    more = f"; {rest} more rank(s) elsewhere" if rest else ""
    return "; ".join([own, *theirs]) + more
