"""Mutation testing on purpose (never in CI): break the code the way a bug would, one mutant at a
time, and check that the unit tests fail. A mutant the tests survive is a hole in the suite.

The mutants are hand-written, one line each, over the logic that decides what a user sees:
stopping and killing nodes, faults and their timing, restarts, the judge of a run, the masking
of secrets, the teardown, the chaos verdict (what holds, what is inconclusive), and the hang
watchdog (progress, divergence, the record of collectives on the GPU). Each names the unit tests
that should catch it; each run has a time limit per test (pytest-timeout), so a mutant that makes
a test hang is caught as a failure, not waited out.

    .venv/bin/python scripts/mutants.py            # every mutant (about 23 minutes on 2 cores)
    .venv/bin/python scripts/mutants.py -k stop    # those whose name has "stop"
    .venv/bin/python scripts/mutants.py -k chaos/  # those of one package's files

It works in a copy of the checkout (a temporary clone of HEAD with the working tree's changes),
so the checkout itself is never changed, and prints a table and the score.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PER_TEST_TIMEOUT_S = 60

SUPERVISOR = ("tests/unit/test_launcher.py", "tests/unit/test_supervisor_collaborators.py",
              "tests/unit/test_reliability.py", "tests/unit/test_faults.py", "tests/unit/test_fault_kinds.py")
FAULTS = ("tests/unit/test_faults.py", "tests/unit/test_fault_kinds.py", "tests/unit/test_supervisor_collaborators.py",
          "tests/unit/test_launcher.py", "tests/unit/test_progress.py")
JUDGE = ("tests/unit/test_outcome.py", "tests/unit/test_launcher.py", "tests/unit/test_reliability.py")
SECRETS = ("tests/unit/test_user_env.py", "tests/unit/test_config.py", "tests/unit/test_cli.py", "tests/unit/test_runs.py")
TEARDOWN = ("tests/unit/test_launcher.py", "tests/unit/test_reliability.py")
CHAOS = ("tests/unit/test_chaos.py", "tests/unit/test_storage_faults.py", "tests/unit/test_report.py")
GRACE = ("tests/unit/test_launcher.py", "tests/unit/test_outcome.py", "tests/unit/test_runs.py")
INIT = ("tests/unit/test_init_calls.py",)
HANGS = ("tests/unit/test_hangs.py", "tests/unit/test_gpu_hangs.py", "tests/unit/test_crash_dump.py",
         "tests/workers/test_collective_record.py")


@dataclass(frozen=True)
class Mutant:
    """One change to one file: ``old`` (found exactly once) becomes ``new``."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    equivalent: str = ""  # why no test can tell it from the code: the behaviour is the same


MUTANTS = [
    Mutant("stop sends no SIGTERM and sets no deadline", "orchestrate/supervise/supervisor.py",
           '            self.signal(tracker, "SIGTERM")\n            self.force_at[tracker.name] = now + grace_s\n',
           "            pass\n", SUPERVISOR),
    Mutant("kill sends no SIGKILL", "orchestrate/supervise/supervisor.py",
           'if self.signal(tracker, "SIGKILL"):', "if False:", SUPERVISOR),
    Mutant("a paused node is signalled without being unpaused", "orchestrate/supervise/supervisor.py",
           "                unpause_if_paused(tracker.container)\n", "                pass\n", SUPERVISOR),
    Mutant("SIGKILL never follows the grace", "orchestrate/supervise/supervisor.py",
           "            if now >= at:\n", "            if False:\n", SUPERVISOR),
    Mutant("SIGKILL comes at once, not after the grace", "orchestrate/supervise/supervisor.py",
           "            if now >= at:\n", "            if True:\n", SUPERVISOR),
    Mutant("a preempt never gets its SIGKILL", "orchestrate/supervise/supervisor.py",
           "            self.force_at[tracker.name] = self.clock() + self.spec.stop_grace_s\n",
           "            pass\n", SUPERVISOR),
    Mutant("a grace timer outlives its attempt", "orchestrate/supervise/supervisor.py",
           "        self.force_at.pop(tracker.name, None)  # a SIGKILL due after a grace: it ended before\n",
           "", SUPERVISOR,
           equivalent="a restart clears every grace (force_at.clear()), and a grace that runs out skips a node"
                      " that has exited: the pop only tidies"),
    Mutant("one restart more than allowed", "orchestrate/supervise/restart_policy.py",
           "self.restarts >= self.max_restarts", "self.restarts > self.max_restarts", SUPERVISOR),
    Mutant("a step fault fires a step late", "orchestrate/config/fault_spec.py",
           "return step is not None and step >= self.at_step", "return step is not None and step > self.at_step",
           FAULTS),
    Mutant("the ranks waiting at a fault's step are never let go", "orchestrate/faults/scheduler.py",
           "                elif fault.at_step is not None:\n                    mark_fired(self.progress_dir, fault.at_step)\n",
           "                elif fault.at_step is not None:\n                    pass\n", FAULTS),
    Mutant("a fault in an attempt is never armed", "orchestrate/faults/scheduler.py",
           "        for i in newly:\n            self.armed[i] = self.wall()\n",
           "        return\n", FAULTS),
    Mutant("a lasting fault is never ended", "orchestrate/faults/scheduler.py",
           "            self.lasting.remove((fault, node))\n            self.end(fault, node, elapsed_s)\n",
           "            self.lasting.remove((fault, node))\n", FAULTS),
    Mutant("a stopped run still fires its faults", "orchestrate/faults/scheduler.py",
           "        self.stopped_first.extend(self.pending)\n        self.to_fire.clear()\n",
           "        self.stopped_first.extend(self.pending)\n", FAULTS),
    Mutant("an OOM-killed node is not the root cause", "orchestrate/outcome/judge.py",
           "        if result.oom_kills:\n", "        if False:\n", JUDGE),
    Mutant("an injected fault does not explain the others", "orchestrate/outcome/judge.py",
           "        if result.unresponsive or (result.fault and result.state is not NodePhase.SUCCEEDED):",
           "        if result.unresponsive:", JUDGE),
    Mutant("a consequence wins over its cause", "orchestrate/outcome/judge.py",
           "        return (collateral, stamp, result.ended_at)", "        return (stamp, result.ended_at)", JUDGE),
    Mutant("a quoted secret is left in the command line", "orchestrate/config/user_env.py",
           '            text = re.sub(rf"{quote}{escaped}=[^{quote}]*{quote}", f"{quote}{name}={MASK}{quote}", text)\n',
           "            pass\n", SECRETS),
    Mutant("--env NAME=value is left unmasked", "orchestrate/config/user_env.py",
           "        if after_env and \"=\" in arg:\n", "        if False:\n", SECRETS),
    Mutant("the teardown gives up at the first failure", "orchestrate/launch/teardown.py",
           "retry=retry_if_exception_type((OrchestrateError, TryAgain))", "retry=retry_if_exception_type(())",
           TEARDOWN),
    Mutant("a Ctrl-C during the teardown stops it", "orchestrate/launch/teardown.py",
           '            say("teardown in progress; please wait")\n            raise TryAgain from None\n',
           "            raise\n", TEARDOWN),
    Mutant("a fault that never fired passes the trial", "orchestrate/chaos/verdict.py",
           '        reasons += [f"fault {f.describe()}" for f in self.disturbed.unfired_faults]\n', "", CHAOS),
    Mutant("a file that differs passes the trial", "orchestrate/chaos/verdict.py",
           '        reasons += [f"{c.describe()}" for c in self.comparisons if not c.equal]\n', "", CHAOS),
    Mutant("a job that failed under the faults holds", "orchestrate/chaos/verdict.py",
           "        if not self.disturbed.job_succeeded:\n", "        if False:\n", CHAOS),
    Mutant("a trial against a failed undisturbed run holds", "orchestrate/chaos/verdict.py",
           "        if not self.reference.succeeded:\n", "        if False:\n", CHAOS),
    Mutant("as many steps redone as allowed fails", "orchestrate/chaos/verdict.py",
           "                and self.steps_redone > self.max_steps_redone:\n",
           "                and self.steps_redone >= self.max_steps_redone:\n", CHAOS),
    Mutant("a per-step difference passes the trial", "orchestrate/chaos/verdict.py",
           "        if self.steps is not None and not self.steps.equal:\n", "        if False:\n", CHAOS),
    Mutant("faults that all struck before any save hold", "orchestrate/chaos/verdict.py",
           "        elif not after_save:\n", "        elif False:\n", CHAOS),
    Mutant("a job that restarted from the beginning holds", "orchestrate/chaos/verdict.py",
           "        elif not any(s.resumed for s in after_save) and any(s.resumed is False for s in after_save):\n",
           "        elif False:\n", CHAOS),
    Mutant("an inconclusive trial lets the check hold", "orchestrate/chaos/verdict.py",
           "        return INCONCLUSIVE if INCONCLUSIVE in statuses else HOLDS\n", "        return HOLDS\n", CHAOS),
    Mutant("a check with no trial holds", "orchestrate/chaos/verdict.py",
           "        statuses = [t.status for t in self.trials] or [DOES_NOT_HOLD]\n",
           "        statuses = [t.status for t in self.trials]\n", CHAOS),
    Mutant("tensors compared exactly always match", "orchestrate/node/compare_tensors.py",
           "        return torch.equal(a, b) if rtol == 0 else", "        return True if rtol == 0 else", CHAOS),
    Mutant("a tolerance lets any per-step metric pass", "orchestrate/chaos/step_metrics.py",
           "    return value == reference if rtol == 0 else abs(value - reference) <= rtol * abs(reference)\n",
           "    return value == reference if rtol == 0 else True\n", CHAOS),
    Mutant("a finished collective is not progress", "orchestrate/hangs/diagnosis.py",
           "        if snapshot.completed > earlier.completed or snapshot.gpu_states != earlier.gpu_states:\n",
           "        if snapshot.gpu_states != earlier.gpu_states:\n", HANGS),
    Mutant("a GPU that moved on is not progress", "orchestrate/hangs/diagnosis.py",
           "        if snapshot.completed > earlier.completed or snapshot.gpu_states != earlier.gpu_states:\n",
           "        if snapshot.completed > earlier.completed:\n", HANGS),
    Mutant("a rank that computed is not progress", "orchestrate/hangs/diagnosis.py",
           "        if not gpu_waits(snapshot, diverged)"
           " and cpu_share(earlier, snapshot, interval) >= BUSY_CPU_SHARE:\n",
           "        if False:\n", HANGS),
    Mutant("CUDA spinning counts as computing while the GPU waits", "orchestrate/hangs/diagnosis.py",
           "        if not gpu_waits(snapshot, diverged)"
           " and cpu_share(earlier, snapshot, interval) >= BUSY_CPU_SHARE:\n",
           "        if cpu_share(earlier, snapshot, interval) >= BUSY_CPU_SHARE:\n", HANGS),
    Mutant("DDP's backward pass on the GPU waits before the records part", "orchestrate/hangs/diagnosis.py",
           "    return running is not None and (diverged or not running.is_backward_pass)\n",
           "    return running is not None\n", HANGS),
    Mutant("a restarted rank is not progress", "orchestrate/hangs/diagnosis.py",
           "        if earlier is None or earlier.pid != snapshot.pid:\n", "        if earlier is None:\n", HANGS),
    Mutant("a rank computing its backward pass waits", "orchestrate/hangs/diagnosis.py",
           "    if collective is not None and not (collective.is_backward_pass and share >= BUSY_CPU_SHARE):\n",
           "    if collective is not None:\n", HANGS),
    Mutant("a rank whose script returned and has no process is not said to have exited",
           "orchestrate/supervise/rank_probe.py",
           "                why.update({rank: exited_reason(host.name) for rank in mine - set(states) if rank in returned})\n",
           "                pass\n", ("tests/unit/test_rank_probe.py",)),
    Mutant("a rank not yet started has exited", "orchestrate/supervise/rank_probe.py",
           "                why.update({rank: exited_reason(host.name) for rank in mine - set(states) if rank in returned})\n",
           "                why.update({rank: exited_reason(host.name) for rank in mine - set(states)})\n",
           ("tests/unit/test_rank_probe.py",)),
    Mutant("a finished node's ranks are not waited for", "orchestrate/supervise/supervisor.py",
           "        return planned | {rank for t in self.trackers.values() if t.phase is NodePhase.SUCCEEDED\n",
           "        return planned | {rank for t in self.trackers.values() if False\n", HANGS),
    Mutant("an exited rank is one that did not answer", "orchestrate/hangs/diagnosis.py",
           "        if why.startswith(EXITED):\n", "        if False:\n", HANGS),
    Mutant("an exited rank gets the store's hint", "orchestrate/hangs/diagnosis.py",
           "        elif self.hung and self.exited and self.someone_waits:\n", "        elif False:\n", HANGS),
    Mutant("an exited rank's hint where nobody waits", "orchestrate/hangs/diagnosis.py",
           "        elif self.hung and self.exited and self.someone_waits:\n",
           "        elif self.hung and self.exited:\n", HANGS),
    Mutant("a lost peer nobody left gets the DDP forward pass's hint", "orchestrate/outcome/judge.py",
           "    if failure is None or not failure.peers_finished:\n", "    if failure is None:\n",
           ("tests/unit/test_judge.py",)),
    Mutant("a node with more ranks than GPUs is told to pick by LOCAL_RANK", "orchestrate/outcome/judge.py",
           "    if local >= count:\n", "    if False:\n", ("tests/unit/test_judge.py",)),
    Mutant("torch's check on a gone peer is the rank's own failure", "orchestrate/outcome/root_cause.py",
           '    "failed to pass monitoredBarrier",\n', "", ("tests/unit/test_judge.py", "tests/unit/test_output.py")),
    Mutant("a DDP forward pass made alone gets no hint", "orchestrate/hangs/diagnosis.py",
           "        if made_alone:\n", "        if False:\n", HANGS),
    Mutant("every rank in a DDP forward pass gets its hint", "orchestrate/hangs/diagnosis.py",
           "if not waiting or (len(waiting) == len(self.collectives) and not self.exited):",
           "if not waiting:", HANGS),
    Mutant("a finished DDP forward pass gets its hint", "orchestrate/hangs/diagnosis.py",
           'entries and entries[-1].get("state") in ("entered", "running", "failed")', "entries and True", HANGS),
    Mutant("a forward pass on the GPU gets no hint", "orchestrate/hangs/diagnosis.py",
           'in ("entered", "running", "failed")', 'in ("entered", "failed")', HANGS),
    Mutant("a forward pass the collective timeout ended gets no hint", "orchestrate/hangs/diagnosis.py",
           'in ("entered", "running", "failed")', 'in ("entered", "running")', HANGS),
    Mutant("a training step's forward pass gets the hint", "orchestrate/hangs/diagnosis.py",
           "not in others | forward_lines(self.collectives[rank][:-1])", "not in others", HANGS),
    Mutant("the others' forward passes are not looked at", "orchestrate/hangs/diagnosis.py",
           "not in others | forward_lines(", "not in set() | forward_lines(", HANGS),
    Mutant("the DDP forward pass's hint drops the debug hint everywhere", "orchestrate/hangs/diagnosis.py",
           "elif channel_ends(self.divergence.group) is None and not made_alone:",
           "elif channel_ends(self.divergence.group) is None and False:", HANGS),
    Mutant("making a process group is not recorded", "orchestrate/node/collective_log.py",
           "    for name in (*COLLECTIVES, NEW_GROUP):\n", "    for name in COLLECTIVES:\n",
           ("tests/workers/test_collective_record.py",)),
    Mutant("a group only its members make is recorded", "orchestrate/node/collective_log.py",
           'if self.nested() or _argument(args, kwargs, "use_local_synchronization", local_index):',
           "if self.nested():", HANGS),
    Mutant("groups made differently get the debug hint", "orchestrate/hangs/diagnosis.py",
           'if f"entered {NEW_GROUP}(" in self.divergence.text:', "if False:", HANGS),
    Mutant("the ranks still running are not asked where they are at a failure", "orchestrate/supervise/supervisor.py",
           "            self.asked_at_failure = self.ask_where_ranks_are()\n", "", HANGS),
    Mutant("a timeout takes a rank's answer from before the failure", "orchestrate/hangs/diagnosis.py",
           "if s.time >= since}", "if True}", HANGS),
    Mutant("a save made alone is named by its tensors", "orchestrate/node/checkpoint_collectives.py",
           "            entry = torch_frame.f_code.co_name  # the outermost is the one the user called\n", "            pass\n",
           ("tests/unit/test_checkpoint_collectives.py",)),
    Mutant("the innermost DCP entry point names the save", "orchestrate/node/checkpoint_collectives.py",
           "            entry = torch_frame.f_code.co_name  # the outermost is the one the user called\n",
           "            entry = entry or torch_frame.f_code.co_name\n", ("tests/unit/test_checkpoint_collectives.py",)),
    Mutant("a failed rank's record is not read for its collective", "orchestrate/supervise/diagnosis.py",
           "            cause.collective, cause.training_pass = failed_collective(",
           "            cause.collective, cause.training_pass = ('', '') or failed_collective(", HANGS),
    Mutant("a torn file counts as saved before its strike", "orchestrate/chaos/attempts.py",
           "if w.time <= at and w.path != fault.struck_file)", "if w.time <= at)", CHAOS),
    Mutant("a save made alone with peers finished gets no hint", "orchestrate/outcome/judge.py",
           'if f"({marker}" in failure.collective or any(', "if any(", ("tests/unit/test_judge.py",)),
    Mutant("the lines a rank counted past its last entries are not read", "orchestrate/hangs/diagnosis.py",
           '                   and not made_before(rank, str(entry.get("at"))) for rank, entry in waiting.items())',
           "                   for rank, entry in waiting.items())", HANGS),
    Mutant("a rank counts no call lines", "orchestrate/node/collective_log.py",
           "            self.lines[caller] = self.lines.pop(caller, 0) + 1\n", "", HANGS),
    Mutant("FSDP's gathering of parameters is named by its tensors", "orchestrate/node/fsdp_collectives.py",
           "what = PARAMETERS if name in GATHERING else GRADIENTS", "what = GRADIENTS",
           ("tests/unit/test_fsdp_collectives.py",)),
    Mutant("FSDP's other collectives are named as its parameters", "orchestrate/node/fsdp_collectives.py",
           "what = PARAMETERS if name in GATHERING else", "what = PARAMETERS if True else",
           ("tests/unit/test_fsdp_collectives.py",)),
    Mutant("the describer's name hides the tensors", "orchestrate/node/collective_log.py",
           'return f"{named}: {tensors}" if tensors else named', "return named",
           ("tests/unit/test_fsdp_collectives.py",)),
    Mutant("a failed collective's record is overwritten as the job ends", "orchestrate/node/snapshot.py",
           "        if self.failed_at is not None and self.log.completed == self.failed_at:\n",
           "        if False:\n", HANGS),
    Mutant("a generator of ranks is read before torch sees it", "orchestrate/node/collective_log.py",
           "    if not isinstance(ranks, (list, tuple, set, frozenset, range)):\n", "    if False:\n", HANGS),
    Mutant("fully_shard's class names the module", "orchestrate/node/fsdp_collectives.py",
           "        return name[4:]\n", "        return name\n", ("tests/unit/test_fsdp_collectives.py",)),
    Mutant("an FSDP forward pass made alone gets the DDP hint", "orchestrate/hangs/diagnosis.py",
           "(FSDP_PARAMETERS, FSDP_FORWARD_FRAMES, FSDP_FORWARD_HINT)",
           "(FSDP_PARAMETERS, FSDP_FORWARD_FRAMES, DDP_FORWARD_HINT)", HANGS),
    Mutant("an FSDP all-gather in the last lines alone gives no hint", "orchestrate/hangs/diagnosis.py",
           '                       ("/torch/distributed/fsdp/", "in all_gather_into_tensor"))',
           "                       )", ("tests/unit/test_judge.py",)),
    Mutant("a peer fingerprint torch could not read is named as read", "orchestrate/outcome/root_cause.py",
           '    unread = {m["rank"] for m in found[1:] if m["seq"] == "0" and found[0]["seq"] != "0"}\n',
           "    unread = set()\n", HANGS),
    Mutant("a torn write strikes when it was armed", "orchestrate/chaos/attempts.py",
           "        at = struck_at(fault)\n", "        at = fault.fired_time or 0.0\n", CHAOS),
    Mutant("a rank a step behind the launcher counts one step short", "orchestrate/chaos/attempts.py",
           "        return done + following[:1]\n", "        return done\n", CHAOS),
    Mutant("a torn write's strike counts the step it was armed at", "orchestrate/chaos/attempts.py",
           "if not done or fault.struck_time is not None or fault.step is None:",
           "if not done or fault.step is None:", CHAOS),
    Mutant("a builtin's error inside the hook's wrappers keeps their frames", "orchestrate/node/worker_start.py",
           "calls_wrapped(linecache.getline(filename, innermost.tb_lineno))", "calls_wrapped('')",
           ("tests/workers/test_worker_start.py",)),
    Mutant("an error file's builtin error inside the wrappers keeps their frames", "orchestrate/outcome/root_cause.py",
           "        if not calls_wrapped(lines[line] if line < len(lines) else \"\"):\n",
           "        if True:\n", ("tests/unit/test_outcome.py",)),
    Mutant("a file on the node's own disk opened to append is not reported", "orchestrate/node/shared_writes.py",
           "        if writes(mode):\n", "        if truncates(mode):\n", ("tests/unit/test_shared_writes.py",)),
    Mutant("a file in the run's directory counts as the node's own", "orchestrate/node/shared_writes.py",
           "elif report_local is not None and node_local(path, shared_dirs) and not opened_by_torch(",
           "elif report_local is not None and not opened_by_torch(", ("tests/unit/test_shared_writes.py",)),
    Mutant("every file on a node's own disk is reported, however many", "orchestrate/node/progress.py",
           " or len(channel.written_locally) >= most ", " ", ("tests/unit/test_shared_writes.py",)),
    Mutant("the progress channel reports its own file as the node's own", "orchestrate/node/progress.py",
           "            or path.startswith(str(channel.directory) + os.sep):", "            or False:",
           ("tests/unit/test_shared_writes.py",)),
    Mutant("a file a report opens is reported in turn", "orchestrate/node/shared_writes.py",
           '    if getattr(_reporting, "active", False):\n        return\n', "",
           ("tests/unit/test_shared_writes.py", "tests/unit/test_progress.py")),
    Mutant("a file the failing node wrote too gets the node-local hint", "orchestrate/outcome/judge.py",
           "    if not writers or any(node_of.get(rank) == failure.node for rank in writers):\n",
           "    if not writers:\n", ("tests/unit/test_outcome.py",)),
    Mutant("a path that only starts like the missing directory counts as in it", "orchestrate/outcome/judge.py",
           'if path == missing or path.startswith(missing + "/")}', "if path.startswith(missing)}",
           ("tests/unit/test_outcome.py",)),
    Mutant("a file every node wrote is named to a hung rank", "orchestrate/outcome/judge.py",
           "if ranks and all(node_of.get(rank) not in (None, node) for rank in ranks)}",
           "if ranks and any(node_of.get(rank) not in (None, node) for rank in ranks)}", ("tests/unit/test_outcome.py",)),
    Mutant("a rank in a collective counts as waiting outside any", "orchestrate/outcome/judge.py",
           'idle = sorted(a.rank for a in hang.activities if a.state == "idle" and a.rank in node_of)',
           'idle = sorted(a.rank for a in hang.activities if a.rank in node_of)', ("tests/unit/test_outcome.py",)),
    Mutant("the first files are named, not the latest", "orchestrate/outcome/judge.py",
           "list(others.items())[-LOCAL_FILES_SHOWN:]", "list(others.items())[:LOCAL_FILES_SHOWN]",
           ("tests/unit/test_outcome.py",)),
    Mutant("a job that still worked is told of files as if hung", "orchestrate/outcome/judge.py",
           "    if hang is None or not hang.hung:\n        return \"\"\n    node_of", "    if hang is None:\n"
           "        return \"\"\n    node_of", ("tests/unit/test_outcome.py",)),
    Mutant("a sampler that does not shuffle is reported", "orchestrate/node/sampler_epochs.py",
           '        if getattr(self, "shuffle", False):\n', "        if True:\n", ("tests/unit/test_sampler_epochs.py",)),
    Mutant("another seed's order counts as the same", "orchestrate/node/sampler_epochs.py",
           'key = (line, int(getattr(self, "seed", 0)), epoch)', "key = (line, 0, epoch)",
           ("tests/unit/test_sampler_epochs.py",)),
    Mutant("a line is reported each time it repeats", "orchestrate/node/sampler_epochs.py",
           "if key in iterated and line not in reported:", "if key in iterated:", ("tests/unit/test_sampler_epochs.py",)),
    Mutant("the epoch of a sampler shuffled alike is lost on the channel", "orchestrate/outcome/progress.py",
           "    record.shuffle_epoch = epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None\n",
           "    record.shuffle_epoch = None\n", ("tests/unit/test_sampler_epochs.py",)),
    Mutant("the hook does not watch DistributedSampler", "orchestrate/node/worker_start.py",
           "                                     lambda: sampler_epochs.install(report_same_shuffle))\n",
           "                                     lambda: None)\n", ("tests/workers/test_worker_start.py",)),
    Mutant("torch's own files on a node's disk count as the script's", "orchestrate/node/shared_writes.py",
           " and not opened_by_torch(sys._getframe(2)):", ":",
           ("tests/unit/test_shared_writes.py", "tests/workers/test_step_counter.py")),
    Mutant("the files on a node's disk are named in path order, not the latest", "orchestrate/supervise/progress.py",
           "for path, ranks in self.written_locally.items()}", "for path, ranks in sorted(self.written_locally.items())}",
           ("tests/unit/test_shared_writes.py",)),
    Mutant("a torn write's strike is not recorded", "orchestrate/supervise/supervisor.py",
           'self.faults.note(fault, event.describe(), struck=event.file if event.torn else "")',
           "self.faults.note(fault, event.describe())",
           ("tests/unit/test_supervisor_faults.py",)),
    Mutant("shapes that differ are no divergence", "orchestrate/hangs/collectives.py",
           "else (lambda c: (c.op, c.shapes))", "else (lambda c: c.op)", HANGS),
    Mutant("a later divergence is named before the first", "orchestrate/hangs/collectives.py",
           "    return min(found, key=lambda item: item[0])[1] if found else None\n",
           "    return max(found, key=lambda item: item[0])[1] if found else None\n", HANGS),
    Mutant("a rank one collective behind is not named", "orchestrate/hangs/collectives.py",
           "        if last < target.seq:\n", "        if last < target.seq - 1:\n", HANGS),
    Mutant("a working job is judged hung", "orchestrate/hangs/watchdog.py",
           "        if not found.hung:  # working quietly", "        if False:  # working quietly", HANGS),
    Mutant("a hung run ends before --hang-timeout", "orchestrate/hangs/watchdog.py",
           "        if self.end_after_s is not None and quiet >= self.end_after_s:\n",
           "        if self.end_after_s is not None:\n", HANGS),
    Mutant("a rank that did not answer is judged with the others", "orchestrate/hangs/watchdog.py",
           "        if expected - set(second.snapshots) - set(absent) or not (second.snapshots or absent):\n",
           "        if not (second.snapshots or absent):\n", HANGS),
    Mutant("a GPU in a collective reads as not there yet", "orchestrate/node/gpu_marks.py",
           '    return "running" if gpu.reached(before) else "queued"\n', '    return "queued"\n', HANGS),
    Mutant("the collective a GPU waits in drops out of the record", "orchestrate/node/collective_log.py",
           "(_POINTS not in self.entries[0] or len(self.entries) > KEEP_ON_GPU)", "True", HANGS),
    Mutant("the GPU is asked outside thread-local capture mode", "orchestrate/node/collective_log.py",
           "        if not self.gpu.ready_here():\n            return\n", "", HANGS),
    Mutant("a snapshot leaves out the oldest collective the GPU has not finished", "orchestrate/node/collective_log.py",
           '        unfinished = [entry for entry in older if entry["state"] in ON_GPU][:1]\n',
           "        unfinished = []\n", HANGS),
    # a node whose stop grace ran out, named in the summary (2026-11-27)
    Mutant("any 137 in a stop counts as the grace running out", "orchestrate/supervise/supervisor.py",
           " or ended < request.time + request.grace_s - KILL_TIME_SLACK_S:", ":", GRACE),
    Mutant("the launcher keeps the first stop's grace", "orchestrate/supervise/supervisor.py",
           "        request = read_stop_request(self.spec.run_dir)\n        ended", "        request = self.stop_request\n"
           "        ended", GRACE),
    Mutant("a stop with no grace names its nodes", "orchestrate/supervise/supervisor.py",
           "if not request.grace_s or request.time is None", "if request.time is None", GRACE),
    Mutant("the launcher's own grace is not noted for the summary", "orchestrate/supervise/supervisor.py",
           "                tracker.result.grace_ran_out, tracker.result.still_running = True, still\n", "", GRACE),
    Mutant("stop RUN leaves its listing on its own terminal only", "orchestrate/engine/runs.py",
           "            note_still_running(run, listed)", "            pass", GRACE),
    Mutant("a node's end is read after its launcher may have removed it", "orchestrate/engine/runs.py",
           "        node.container.reload()\n    except engine_errors():  # removed meanwhile",
           "        node.container.remove(force=True)\n        node.container.reload()\n"
           "    except engine_errors():  # removed meanwhile", GRACE),
    Mutant("the list only a gather's root gives is described", "orchestrate/node/collective_log.py",
           '        described = slice(1) if name in ROOT_ONLY_LISTS else slice(None)\n',
           '        described = slice(None)\n', HANGS),
    Mutant("a collective's root is not recorded", "orchestrate/node/collective_log.py",
           "        return \" \".join(part for part in (tensors, root) if part)\n", "        return tensors\n", HANGS),
    Mutant("ranks that name different roots get torch's check as the hint", "orchestrate/hangs/collectives.py",
           "hint = ROOT_HINT if roots_alone_differ(calls) else uneven_steps(calls, snapshots)",
           "hint = uneven_steps(calls, snapshots)", HANGS),
    Mutant("ranks that part in a training step get no hint on their steps", "orchestrate/hangs/collectives.py",
           "hint = ROOT_HINT if roots_alone_differ(calls) else uneven_steps(calls, snapshots)",
           'hint = ROOT_HINT if roots_alone_differ(calls) else ""', HANGS),
    Mutant("an evaluation's forward pass counts as a training step's", "orchestrate/hangs/collectives.py",
           "kind = training_pass(call.shapes, others_made_it)", "kind = training_pass(call.shapes, True)", HANGS),
    Mutant("the ranks' own lines count as the others'", "orchestrate/hangs/collectives.py",
           "for other in calls if other != rank)", "for other in calls)", HANGS),
    Mutant("a forward pass is a training step's wherever it was made", "orchestrate/hangs/snapshots.py",
           "if shapes.startswith(DDP_BUFFERS) and others_made_it:", "if shapes.startswith(DDP_BUFFERS):", HANGS),
    Mutant("ranks in different passes of their steps get no hint", "orchestrate/hangs/collectives.py",
           "    if not passes:\n        return \"\"\n    elsewhere = [rank for rank in calls if rank not in passes]\n",
           "    elsewhere = [rank for rank in calls if rank not in passes]\n    if not elsewhere:\n"
           "        return \"\"\n", HANGS),
    Mutant("the steps each side made are not counted", "orchestrate/hangs/collectives.py",
           'made {made.pop()}" if len(made) == 1 and None not in made else ""', 'made {made.pop()}" if False else ""',
           HANGS),
    Mutant("a count not known is said", "orchestrate/hangs/collectives.py",
           'made {made.pop()}" if len(made) == 1 and None not in made else ""',
           'made {made.pop()}" if len(made) == 1 else ""', HANGS),
    Mutant("a step's count is said where its ranks' counts differ", "orchestrate/hangs/collectives.py",
           "    if len(now) != 1 or None in now:\n", "    if None in now:\n", HANGS),
    Mutant("a rank that exited from its training loop gets the hint for any exit", "orchestrate/hangs/diagnosis.py",
           "self.left_mid_training or EXITED_HINT", "EXITED_HINT", HANGS),
    Mutant("a call made alone keeps the hint on the steps beside its own", "orchestrate/hangs/diagnosis.py",
           "if not (made_alone and self.parted_mid_training):", "if True:", HANGS),
    Mutant("a rank that exited beside ranks parted in a step gets the hint twice", "orchestrate/hangs/diagnosis.py",
           "EXITED_HINT if self.parted_mid_training else self.left_mid_training", "self.left_mid_training", HANGS),
    Mutant("a lost store's failure gets the hint for a call made alone", "orchestrate/outcome/judge.py",
           "    if failure is None or not failure.peers_finished:\n",
           "    if failure is None or not failure.description:\n", ("tests/unit/test_judge.py",)),
    Mutant("a peer lost in a backward pass gets no hint on the steps", "orchestrate/outcome/judge.py",
           "or not failure.peers_finished or not failure.training_pass:", "or not failure.peers_finished or True:",
           ("tests/unit/test_judge.py", "tests/unit/test_outcome.py")),
    Mutant("a peer lost in an evaluation gets the hint on the steps", "orchestrate/hangs/snapshots.py",
           "training_pass(last.shapes, others_made_it=False)", "training_pass(last.shapes, others_made_it=True)", HANGS),
    Mutant("a node killed at its exit barrier is not said to be", "orchestrate/outcome/summary.py",
           "{EXIT_BARRIER_NOTE * at_exit_barrier(r)}", "{''}", ("tests/unit/test_outcome.py",)),
    Mutant("a node whose worker still ran is said to wait at its exit barrier", "orchestrate/outcome/summary.py",
           '            and bool(result.still_running) and all(p.startswith("torchrun ") for p in result.still_running))',
           "            )", ("tests/unit/test_outcome.py",)),
    Mutant("a node whose ranks had not finished is said to wait at its exit barrier", "orchestrate/outcome/summary.py",
           "bool(ranks) and all(rank in result.finished_ranks for rank in ranks)", "bool(ranks)",
           ("tests/unit/test_outcome.py",)),
    Mutant("a rank that wrote the file it did not find is told it read too early", "orchestrate/outcome/judge.py",
           "    if not writers or failure.rank in writers:\n", "    if not writers:\n", ("tests/unit/test_outcome.py",)),
    Mutant("a missing file named under /workspace is not matched", "orchestrate/outcome/judge.py",
           'missing = normal[len(WORKSPACE_DIR) + 1:] if normal.startswith(WORKSPACE_DIR + "/") else normal',
           "missing = normal", ("tests/unit/test_outcome.py",)),
    Mutant("a missing file's path is not normalized", "orchestrate/outcome/judge.py",
           'normal = posixpath.normpath(named) if named else ""', "normal = named", ("tests/unit/test_outcome.py",)),
    Mutant("a lost store's failure counts as one whose peers finished", "orchestrate/outcome/judge.py",
           "    if failure is None or not failure.peers_finished or not failure.training_pass:\n",
           "    if failure is None or not failure.description or not failure.training_pass:\n",
           ("tests/unit/test_judge.py",)),
    Mutant("a missing directory is not matched by the files under it", "orchestrate/outcome/judge.py",
           "found = [path for path in written_shared if path == missing or path.startswith(missing + \"/\")]",
           "found = [path for path in written_shared if path == missing]", ("tests/unit/test_outcome.py",)),
    Mutant("a file read too early gets no hint", "orchestrate/outcome/summary.py",
           "                  or read_too_early_hint(failure, outcome.results, outcome.written_shared)\n", "",
           ("tests/unit/test_outcome.py",)),
    Mutant("other tensors from different roots get the root hint", "orchestrate/hangs/collectives.py",
           "    return len({(op, moved) for op, moved, _ in split}) == 1 and len({root for _, _, root in split}) > 1\n",
           "    return len({root for _, _, root in split}) > 1\n", HANGS),
    Mutant("a rank that ends by os._exit(0) does not say it finished", "orchestrate/node/worker_start.py",
           "    report_a_quick_exit_too(report_finished)\n", "", ("tests/unit/test_progress.py",)),
    Mutant("a forked DataLoader worker's os._exit(0) says its rank finished", "orchestrate/node/worker_start.py",
           "        if status == 0 and os.getpid() == pid:\n", "        if status == 0:\n",
           ("tests/unit/test_progress.py",)),
    Mutant("env:// is read from torchrun's environment, not the script's", "orchestrate/node/init_record.py",
           '    return {**asked, "store": env_store(environ), "via": VIA_ENV}\n',
           '    return {**asked, "store": "", "via": VIA_ENV}\n', INIT),
    Mutant("init_method's query is ignored", "orchestrate/node/init_record.py",
           "        return as_int(query.get(key)) if key in query else as_int(environ.get(variable))\n",
           "        return as_int(environ.get(variable))\n", INIT),
    Mutant("a rank of -1 (torch's 'not given') is taken as asked for", "orchestrate/node/init_record.py",
           "        if given is not None and given >= 0:\n", "        if given is not None:\n", INIT),
    Mutant("an init_process_group that fails writes no record", "orchestrate/node/init_record.py",
           "            failed()\n            raise\n", "            raise\n", INIT),
    Mutant("the hook records no init_process_group", "orchestrate/node/worker_start.py",
           '        init_record.install(torchrun_gave, lambda call: setattr(log, "init_call", call),\n',
           '        (lambda *_: None)(torchrun_gave, lambda call: setattr(log, "init_call", call),\n',
           ("tests/workers/test_collective_record.py",)),
    Mutant("a file store on one node is named as each node's own", "orchestrate/hangs/init_calls.py",
           '    if len({nodes.get(rank, "") for rank in in_files}) < 2:\n', "    if not in_files:\n", INIT),
    Mutant("any other rank is called its LOCAL_RANK", "orchestrate/hangs/init_calls.py",
           '        local = ", its LOCAL_RANK," if call.rank == call.torchrun_local_rank else ""\n',
           '        local = ", its LOCAL_RANK,"\n', INIT),
    Mutant("ranks past init_process_group are asked about their call", "orchestrate/hangs/diagnosis.py",
           '    in_init = {rank for g in groups if g.where.startswith("init_process_group ") for rank in g.ranks}\n',
           "    in_init = set(now.snapshots)\n", INIT),
    Mutant("a failed collective's record after init counts as a failed init", "orchestrate/hangs/snapshots.py",
           "        return self.reason == FAILED_REASON and self.init is not None and not self.collectives\n",
           "        return self.reason == FAILED_REASON and self.init is not None\n", INIT),
    Mutant("one look takes no CPU of the rank's own", "orchestrate/hangs/diagnosis.py",
           "        return now.cpu_recent or 0.0\n", "        return 0.0\n", HANGS),
    Mutant("a timeout while a rank computes is called a hang", "orchestrate/hangs/diagnosis.py",
           '    found.hung = not any(a.state == "busy" for a in found.activities)\n', "    found.hung = True\n", HANGS),
    Mutant("the snapshot thread takes no CPU samples", "orchestrate/node/snapshot.py",
           "            self.sample_cpu()\n", "", ("tests/workers/test_collective_record.py",)),
    Mutant("a timeout while the job worked is not explained in the summary", "orchestrate/outcome/summary.py",
           '            lines += [f"  {outcome.hang.headline}", *outcome.hang.lines()[1:]]\n', "            pass\n",
           HANGS),
    Mutant("an appended file counts as written whole", "orchestrate/node/shared_writes.py",
           '    return "w" in str(mode)\n', '    return "w" in str(mode) or "a" in str(mode)\n',
           ("tests/unit/test_shared_writes.py",)),
    Mutant("a file one rank wrote is named as written by several", "orchestrate/outcome/model.py",
           "for path, ranks in self.written_shared.items() if len(ranks) > 1}",
           "for path, ranks in self.written_shared.items()}", ("tests/unit/test_shared_writes.py",)),
    Mutant("a path that only starts like a shared directory counts as under it", "orchestrate/node/shared_writes.py",
           '        if path.startswith(directory.rstrip("/") + "/"):\n', "        if path.startswith(directory):\n",
           ("tests/unit/test_shared_writes.py", *INIT)),
    Mutant("a file is reported each time it is written", "orchestrate/node/progress.py",
           "    if channel is not None and path not in channel.written:\n", "    if channel is not None:\n",
           ("tests/unit/test_shared_writes.py",)),
    Mutant("a worker's pieces are joined across its stdout and stderr", "orchestrate/supervise/worker_lines.py",
           "        before = self.unfinished.pop((source, piece.local_rank), None)",
           "        before = self.unfinished.pop(next((k for k in self.unfinished if k[1] == piece.local_rank),"
           " (source, piece.local_rank)), None)", ("tests/unit/test_container_log.py", "tests/unit/test_output.py")),
    Mutant("a stream followed again shows its last line twice", "orchestrate/engine/container_log.py",
           "for raw in raws), self.position):", "for raw in raws), (0.0, 0)):",
           ("tests/unit/test_container_log.py",)),
    Mutant("the log ends when its first stream ends", "orchestrate/engine/container_log.py",
           "            if left[0] == 0:\n", "            if True:\n", ("tests/unit/test_container_log.py",)),
    Mutant("a stream that ends while its container runs is not asked for again", "orchestrate/engine/container_log.py",
           "            if not _still_running(self.container):\n", "            if True:\n",
           ("tests/unit/test_container_log.py",)),
    Mutant("a stream asked for again shows its last line twice", "orchestrate/engine/container_log.py",
           "    return stamp, at_last + 1 if stamp == last else 1\n",
           "    return stamp, 0\n", ("tests/unit/test_container_log.py",)),
    Mutant("a line cut by a dropped connection is shown cut", "orchestrate/engine/container_log.py",
           "raws = stream_lines(chunks, unfinished)", "raws = stream_lines(chunks)",
           ("tests/unit/test_container_log.py",)),
    Mutant("lines read before a stream broke off are read again", "orchestrate/engine/container_log.py",
           "        if skip and line.stamp == stamp:\n", "        if False:\n",
           ("tests/unit/test_container_log.py", "tests/unit/test_supervisor_collaborators.py")),
    Mutant("two bars at once whose descriptions differ in numbers are taken for one", "orchestrate/supervise/progress_bars.py",
           "(before.bar == after.bar and before.total == after.total", "(before.bar == after.bar",
           ("tests/unit/test_progress_bars.py",)),
    Mutant("the pump joins a worker's pieces across its streams", "orchestrate/supervise/log_pump.py",
           "        return self.show(tracker.output.add(message.text, message.stamp, message.source))",
           "        return self.show(tracker.output.add(message.text, message.stamp))",
           ("tests/unit/test_supervisor_collaborators.py",)),
    Mutant("a bar whose description changes at each step is a new bar each time", "orchestrate/supervise/progress_bars.py",
           "            self.bars[key] = self.bars.pop(last_key)\n", "            pass\n",
           ("tests/unit/test_progress_bars.py",)),
    Mutant("every redraw of a progress bar is shown", "orchestrate/supervise/progress_bars.py",
           "            show = redraw.elapsed_s - bar.shown.elapsed_s >= self.every_s\n", "            show = True\n",
           ("tests/unit/test_progress_bars.py",)),
    Mutant("a bar's last state is shown twice", "orchestrate/supervise/progress_bars.py",
           "            show = not bar.finish_shown\n", "            show = True\n", ("tests/unit/test_progress_bars.py",)),
    Mutant("a bar cut short does not show where it stopped", "orchestrate/supervise/progress_bars.py",
           "        if not bar.finish_shown:\n            bar.held = line\n", "", ("tests/unit/test_progress_bars.py",)),
    Mutant("the empty line of a bar's first carriage return is shown", "orchestrate/supervise/console_filter.py",
           "            return self.bars.shown(line.node, line.local_rank, line, redraw)\n",
           "            return [*([blank] if blank else []), *self.bars.shown(line.node, line.local_rank, line, redraw)]\n", ("tests/unit/test_progress_bars.py",)),
    Mutant("a rank's last lines keep every redraw of a bar", "orchestrate/supervise/worker_lines.py",
           "                if tail and _redraws_one_bar(tail[-1], line.text):\n", "                if False:\n",
           ("tests/unit/test_progress_bars.py",)),
    Mutant("the spaces that wipe a bar are shown", "orchestrate/supervise/console_filter.py",
           "        if cleared:  # the spaces that wipe a bar left with leave=False\n            return []\n", "",
           ("tests/unit/test_progress_bars.py",)),
    Mutant("any line of spaces is taken for a wiped bar", "orchestrate/supervise/console_filter.py",
           "        cleared = rank in self.after_bar and line.text and not line.text.strip()\n",
           "        cleared = line.text and not line.text.strip()\n", ("tests/unit/test_progress_bars.py",)),
    Mutant("a rank torchrun named that lost its peer is kept beside one that failed by itself", "orchestrate/supervise/diagnosis.py",
           "            own = own_failure_beside(tracker, cause)\n", "            own = None\n", ("tests/unit/test_diagnosis.py",)),
    Mutant("a rank that lost its peer is taken for one that failed by itself", "orchestrate/supervise/diagnosis.py",
           "        if exception and not is_collateral(own, last):\n", "        if exception:\n", ("tests/unit/test_diagnosis.py",)),
]


def copy_of_checkout(into: Path) -> Path:
    """HEAD with the working tree's changes, in ``into``."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(into)], check=True)
    diff = subprocess.run(["git", "diff", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    if diff:
        subprocess.run(["git", "apply"], cwd=into, input=diff, check=True)
    return into


def run_tests(copy: Path, tests: tuple[str, ...]) -> tuple[bool, float, str]:
    """Whether the tests pass in ``copy``, how long they took, and the last line they printed."""
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "3",
                           f"--timeout={PER_TEST_TIMEOUT_S}", *tests], cwd=copy, capture_output=True, text=True,
                          timeout=30 * 60)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    return done.returncode == 0, time.monotonic() - began, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", default="", help="only the mutants whose name or file has this text (chaos/, hangs/)")
    args = parser.parse_args()
    mutants = [m for m in MUTANTS if args.k in m.name or args.k in m.path]
    if not mutants:  # else the baseline would be every test there is
        print(f"no mutant's name or file has {args.k!r}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ddp-mutants-") as scratch:
        copy = copy_of_checkout(Path(scratch) / "checkout")
        baseline = tuple(sorted({t for m in mutants for t in m.tests}))
        passed, seconds, last = run_tests(copy, baseline)
        if not passed:
            print(f"the tests fail before any mutant ({last}): fix them first", file=sys.stderr)
            return 2
        print(f"baseline: {len(baseline)} test files pass in {seconds:.0f} s")
        rows = []
        for mutant in mutants:
            path = copy / mutant.path
            original = path.read_text()
            if original.count(mutant.old) != 1:
                print(f"mutant {mutant.name!r}: its text is not found exactly once in {mutant.path}", file=sys.stderr)
                return 2
            path.write_text(original.replace(mutant.old, mutant.new))
            try:
                survived, seconds, last = run_tests(copy, mutant.tests)
            finally:
                path.write_text(original)
            verdict = ("equivalent" if mutant.equivalent else "SURVIVED") if survived else "killed"
            rows.append((mutant.name, verdict, f"{seconds:.0f} s", last if not mutant.equivalent else mutant.equivalent))
            print(f"{rows[-1][1]:8}  {seconds:5.0f} s  {mutant.name}  ({last})", flush=True)
        shutil.rmtree(copy / ".git", ignore_errors=True)
    killed = sum(1 for r in rows if r[1] == "killed")
    equivalent = sum(1 for r in rows if r[1] == "equivalent")
    print(f"\nmutation score: {killed} of {len(rows) - equivalent} mutants killed"
          f" ({equivalent} equivalent, written down with why)")
    return 0 if killed + equivalent == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
