"""Comparing the ranks' collectives (pure): the first one where they differ, or, when they
agree, the ranks that never arrived where the others wait.

Collectives are matched by process group and sequence number within it: every rank of a group
must call the group's collectives in the same order, with the same op and the same shapes. The
steps:

1. In each group, the sequence numbers its members recorded are compared in order, each among
   the ranks that made it, from the oldest that every member's record still holds; the first
   where ops or shapes differ is the divergence ("collective #21: rank 0 entered
   all_reduce(float32[1]) at desync.py:14; rank 1 entered all_reduce(float32[4]) at
   desync.py:11"). Where the ranks at one line of it made more calls from that line than the
   others had before they went on (a call one rank skipped), that is said too ("rank 1 made 3
   barrier() calls at skip.py:23 where rank 0 made 4: rank 1 skipped one (it went on to skip.py:19)").
2. A rank that waits in a point-to-point call its peer has not made: each direction between two
   ranks is a channel of its own (``p2p 0->1``), whose sends match the peer's receives in order
   ("rank 0 waits in send(float32[8]) #5 to rank 1 at pipe.py:10; rank 1 received 4 and waits in
   all_reduce(float32[8]) #1 at pipe.py:14").
3. Ranks that wait in different process groups have diverged too (one waits for a group the
   others never enter).
4. Otherwise, the ranks that wait name who of the group has not arrived: ranks whose last
   collective in that group is older, or that did not answer at all.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
import re
from typing import Any, Optional

from orchestrate.hangs.snapshots import Collective, RankSnapshot, training_pass
from orchestrate.node.collective_log import P2P
from orchestrate.hangs.stacks import rank_summary
from orchestrate.text import counted, ranks_text


@dataclass(frozen=True)
class Divergence:
    """Where the ranks' collectives part: one line that says it."""

    kind: str  # "mismatch" (they differ), "groups" (they wait in different groups), "missing" (some never came)
    text: str
    seq: Optional[int] = None
    group: str = ""
    hint: str = ""  # what to look for, where the divergence itself says it (ranks that name different roots)
    fewer: str = ""  # where some ranks made fewer calls from a line than the ranks still at it (one skipped)
    ops: tuple[str, ...] = ()  # a mismatch's: the ops the ranks made there (barrier and monitored_barrier)


ROOT_HINT = ("the ranks name different roots: src and dst are global ranks (a node's first rank is not rank 0:"
             " LOCAL_RANK is no root), and every rank of the group must name the same one; with group=, name it"
             " by group_src or group_dst, the rank within the group")
# Ranks that wait in different groups (torch's --debug-collectives checks each group on its own).
GROUPS_HINT = ("each rank waits for the others in a group they have not reached: every rank must call its groups'"
               " collectives in one order (torch's --debug-collectives checks each group on its own, so it does not"
               " see this)")
# Point-to-point transfers that wait for one another round a ring of ranks, and what to change.
CYCLE = "a cycle, each waits for the next"
CYCLE_HINT = ("dist.send returns only once its peer has received, and dist.recv once its peer has sent: ranks"
              " that all send first, or all receive first, wait for one another for ever; order them (even ranks"
              " send first, odd ones receive first), or start both at once with dist.isend and dist.irecv (or"
              " dist.batch_isend_irecv) and wait on them")
UNEVEN_HINT = ("every rank must take as many training steps with a DDP model as the others, and make the same"
               " collectives between them: each step's backward pass all-reduces the gradients with theirs (and"
               " its forward pass broadcasts the model's buffers, where it has any); the others are left waiting"
               " by a rank that runs out of batches first (give every rank as many: DistributedSampler splits a"
               " dataset evenly, padding it, drop_last=True drops the rest; or train under `with model.join():`,"
               " where a rank that has run out of data shadows the others' collectives until every rank has run"
               " out), that leaves the loop on a decision of its own (early stopping on its own validation loss, a"
               " NaN check, a time budget: agree on it, e.g. all_reduce the stop flag with ReduceOp.MAX before"
               " breaking, so that every rank stops at the same step), that skips a collective the others make"
               " (a `continue` or an `if` on the rank or its data around it), that syncs its gradients on other steps"
               " (`no_sync()` accumulation over a count of steps"
               " that differs from rank to rank), or that makes a collective of its own within a step (one under"
               " `if rank == 0:`, such as a checkpoint's ZeroRedundancyOptimizer.consolidate_state_dict or a"
               " broadcast of a file only its node has: every rank of the group makes it, or none does)")
DONE = "done"  # a record's state of a call the rank finished
# The root a collective's record names, at the end of what it moves: ``float32[4] from rank 0``.
ROOT_TEXT = re.compile(r"(?:from|to) rank \S+$")


def channel_ends(group: str) -> Optional[tuple[Optional[int], Optional[int]]]:
    """A point-to-point channel's sender and receiver (None: any rank, or not known); None for a
    process group."""
    if not group.startswith(P2P):
        return None
    ends = group[len(P2P):].split(" ", 1)[0].split("->")
    if len(ends) != 2:
        return None, None
    return tuple(int(end) if end.isdigit() else None for end in ends)  # type: ignore[return-value]


def members_named(group: str) -> Optional[set[int]]:
    """The global ranks a group's name says (``ranks 0,2``, ``ranks 0,2 (2nd group of them)``);
    None for a name that says none (``default``, a group torch could not describe)."""
    if not group.startswith("ranks "):
        return None
    try:
        return {int(r) for r in group[len("ranks "):].split(" (", 1)[0].split(",")}
    except ValueError:
        return None


def group_members(group: str, ranks: set[int]) -> set[int]:
    """Which of ``ranks`` a group's calls involve: every rank of the default group, the ranks a
    group is named by (``ranks 0,2``), a channel's two ends."""
    ends = channel_ends(group)
    if ends is not None:
        return {end for end in ends if end is not None} & ranks
    named = members_named(group)
    return named & ranks if named is not None else set(ranks)


def compared(group: str, snapshots: dict[int, RankSnapshot]) -> bool:
    """Whether a channel's two ends can be matched entry by entry: both known, and its receiver
    made no receive from any rank (numbered in no channel while it waits, so the ones after it
    could be out of step with the sender's)."""
    ends = channel_ends(group)
    if ends is None:
        return True
    sender, receiver = ends
    if sender is None or receiver is None:
        return False
    record = snapshots.get(receiver)
    return record is None or not any(c.group.startswith(f"{P2P}any->") for c in record.collectives)


def elements(shapes: str) -> tuple[str, int] | str:
    """``float32[2,4]`` as its dtype and element count (a send and its receive need only those
    to agree); the text itself where it is not one tensor's."""
    match = re.fullmatch(r"(\w+)\[([\d,]*)\]", shapes)
    if match is None:
        return shapes
    count = 1
    for size in filter(None, match[2].split(",")):
        count *= int(size)
    return match[1], count


def alike(places: dict[int, str]) -> list[tuple[list[int], str]]:
    """The ranks whose text (a call and its place) is the same, together, in the order of their
    first rank: ``{1: "barrier() at t.py:9", 2: "barrier() at t.py:9"}`` as one entry, not one
    line per rank."""
    together: dict[str, list[int]] = {}
    for rank in sorted(places):
        together.setdefault(places[rank], []).append(rank)
    return [(ranks, text) for text, ranks in together.items()]


def calls_text(calls: dict[int, Collective], verb: str, most: int = 4) -> str:
    """``rank 0 entered all_reduce(float32[1]) at t.py:17; ranks 1-3 entered barrier() at
    t.py:19``: the ranks that made one call at one place together, at most ``most`` such calls."""
    grouped = alike({rank: f"{call.call} at {call.at}" for rank, call in calls.items()})
    said = "; ".join(f"{ranks_text(ranks)} {verb} {text}" for ranks, text in grouped[:most])
    rest = sorted(rank for ranks, _ in grouped[most:] for rank in ranks)
    return said + (f"; {ranks_text(rest)} made other calls there" if rest else "")


def parted_at(seq: int, where: str, calls: dict[int, Collective]) -> tuple[str, str]:
    """How a mismatch's line starts, and the verb of its calls: ``collective #21: `` and
    ``entered`` where the ranks wait in it; where some went on past it, that it is where their
    calls first differ, not where they wait, and ``called`` (a call every rank has finished is
    not one they wait in)."""
    went_on = sorted(rank for rank, call in calls.items() if call.state == DONE)
    if not went_on:
        return f"collective #{seq}{where}: ", "entered"
    who = "every rank" if len(went_on) == len(calls) else ranks_text(went_on)
    return f"collective #{seq}{where}, where the ranks' calls first differ ({who} went on past it): ", "called"


def by_group(snapshot: RankSnapshot) -> dict[str, dict[int, Collective]]:
    groups: dict[str, dict[int, Collective]] = {}
    for collective in snapshot.collectives:
        groups.setdefault(collective.group, {})[collective.seq] = collective
    return groups


def mismatch(snapshots: dict[int, RankSnapshot]) -> Optional[Divergence]:
    """Step 1: the first collective, in some group, that its ranks called differently."""
    per_rank = {rank: by_group(s) for rank, s in snapshots.items()}
    groups = sorted({g for record in per_rank.values() for g in record})
    found: list[tuple[float, Divergence]] = []
    for group in groups:
        members = {rank: record[group] for rank, record in per_rank.items() if group in record}
        if len(members) < 2:
            continue
        if not compared(group, snapshots):
            continue
        # each call as the ranks that made it made it: a rank still behind (in another group's
        # call, say) must not hide two that made the same call differently; but none older than
        # every record still holds (a record keeps its last entries: an older call compared among
        # the longer records alone could be an old, meant difference, as an uneven all_to_all's)
        floor = max(min(calls) for calls in members.values())
        made = {seq for calls in members.values() for seq in calls if seq >= floor}
        # a channel's ends call it differently by design (send, recv): their tensors' dtype and
        # size must agree, as gloo and NCCL check (a [2,4] tensor may be received as an [8] one)
        kind: Any = (lambda c: elements(c.shapes)) if channel_ends(group) is not None else (lambda c: (c.op, c.shapes))
        for seq in sorted(made):
            calls = {rank: members[rank][seq] for rank in sorted(members) if seq in members[rank]}
            if len(calls) < 2:
                continue
            kinds = {kind(c) for c in calls.values()}
            if len(kinds) > 1:
                where = "" if group == "default" else f" (group {group})"
                head, verb = parted_at(seq, where, calls)
                text = head + calls_text(calls, verb)
                hint = ROOT_HINT if roots_alone_differ(calls) else uneven_steps(calls, snapshots)
                if not hint:
                    fewer = fewer_calls(group, calls, snapshots)
                elif UNEVEN_HINT in hint:  # a call skipped besides the step's passes: said first, the hint alone
                    fewer = fewer_calls(group, calls, snapshots, passes_too=False)
                    hint = UNEVEN_HINT if fewer else hint
                else:
                    fewer = ""
                ops = tuple(sorted({c.op for c in calls.values()}))
                found.append((seq, Divergence("mismatch", text, seq, group, hint, fewer, ops)))
                break
    return min(found, key=lambda item: item[0])[1] if found else None


def uneven_steps(calls: dict[int, Collective], snapshots: dict[int, RankSnapshot]) -> str:
    """Where some ranks are in a DDP model's training step and the others made another call in its
    place (they left the training loop, or skipped a step), or a pass of another step: that the
    ranks took different numbers of steps, with how many passes each made from the line the ones
    in a step are at, and the call the others are in instead, where the records say ("" where no
    rank is in a training step). The passes are counted as such, not as every collective made
    from their line (a ZeroRedundancyOptimizer's step() on the line of the backward pass would
    make "backward pass 16" of the 4th)."""
    counts = {rank: dict(s.lines) for rank, s in snapshots.items()}
    passes = {}
    for rank, call in calls.items():
        others_made_it = any(call.at in counts.get(other, {}) for other in calls if other != rank)
        kind = training_pass(call.shapes, others_made_it)
        if kind:
            passes[rank] = (call.at, kind)
    if not passes:
        return ""
    elsewhere = [rank for rank in calls if rank not in passes]
    kinds = {kind for _, kind in passes.values()}
    made = {rank: s.passes_made(next(iter(kinds))) for rank, s in snapshots.items()} if len(kinds) == 1 else {}
    instead = {(calls[rank].call, calls[rank].at) for rank in elsewhere}
    extra = calls[elsewhere[0]] if len(instead) == 1 else None
    never_made = extra is not None and all(counts.get(rank) and extra.at not in counts[rank] for rank in passes)
    return f"{step_counts(passes, elsewhere, made, extra, never_made)}{UNEVEN_HINT}"


def fewer_calls(group: str, calls: dict[int, Collective], snapshots: dict[int, RankSnapshot],
                passes_too: bool = True) -> str:
    """Where the ranks at one line of a mismatched collective of ``group`` have made more calls
    from it than the others made before they went on elsewhere (a collective skipped by a
    condition on the rank or its data, or a loop that ran fewer times there): ``rank 1 made 3
    barrier() calls at skip.py:23 where rank 0 made 4: rank 1 skipped one (it went on to
    skip.py:19), by a condition ...``, by the ranks' call lines' counts, the call named where every
    call the records show from that line is one (else ``collectives``); "" where those counts are
    not known or do not say so. The mismatch itself is found where the calls part, later than the
    skip: this names the line the skip is at.
    Where the others never made a call from the line these went on to, that call may as well be
    one they make alone (rank 0's extra barrier to log, under ``if rank == 0:``), and it is said
    too, so that a rank that skipped nothing is not said to have skipped one.
    ``passes_too``: False leaves out the lines of a DDP training step's passes, whose counts the
    uneven steps' hint says (a barrier skipped in a training loop is said beside it).

    A line's count takes in every group's calls from it, so nothing is said of a line the ranks'
    records show in another group too (a helper that reduces in several groups), nor of a
    point-to-point channel, whose ends call from different lines by design.

    Where the counts say so of two lines (in a loop that makes a call at each, rank 3 skipped
    the second one, a barrier, once: it is in its 4th call from the first line while the others
    are in their 3rd barrier, so either side made "fewer" at one line), the line named is the one
    the ranks said to skip it went there from before, by the records: rank 3 went from the first
    line to the barrier each time before, never from the first line to itself (the line that
    sorts first could blame the ranks that skipped nothing)."""
    if channel_ends(group) is not None:
        return ""
    counts = {rank: dict(snapshots[rank].lines) for rank in calls if rank in snapshots}
    elsewhere = {c.at for s in snapshots.values() for c in s.collectives if c.group != group}
    said: list[tuple[str, list[int], str]] = []
    for line in sorted({call.at for call in calls.values()} - elsewhere):
        at_it = [rank for rank, call in calls.items() if call.at == line]
        if not passes_too and any(training_pass(calls[rank].shapes, True) for rank in at_it):
            continue
        gone_on = [rank for rank in calls if rank not in at_it]
        now = {counts.get(rank, {}).get(line) for rank in at_it}
        made = {counts.get(rank, {}).get(line) for rank in gone_on}
        if len(now) != 1 or len(made) != 1 or None in now | made:
            continue
        current, before = now.pop(), made.pop()
        if before >= current:
            continue
        went_to = sorted({calls[rank].at for rank in gone_on})
        one = len(gone_on) == 1
        who = ranks_text(sorted(gone_on))
        names = {c.call for s in snapshots.values() for c in s.collectives if c.at == line}
        noun = f"{names.pop()} call" if len(names) == 1 else "collective"
        skipped = "one" if current - before == 1 else str(current - before)
        head = (f"{who} made {counted(before, noun)} at {line} where {ranks_text(sorted(at_it))} made {current}:"
                f" {who} skipped {skipped} ({'it' if one else 'they'} went on to {', '.join(went_to)})")
        if all(counts.get(rank) and not set(went_to) & set(counts[rank]) for rank in at_it):
            # the others never called from where these went: as likely a call made alone (rank 0's
            # extra barrier under `if rank == 0:`) as one skipped before it; the records cannot tell
            makes = "makes" if one else "make"
            never = "has" if len(at_it) == 1 else "have"
            said.append((line, sorted(gone_on),
                         f"{head}, or ran that loop fewer times, or {makes} the call at {', '.join(went_to)} that"
                         f" {ranks_text(sorted(at_it))} {never} never made (a condition on the rank or its data)"))
        else:
            said.append((line, sorted(gone_on),
                         f"{head}, by a condition on the rank or its data (a `continue` or an `if` around the call),"
                         " or ran that loop fewer times"))
    if len(said) > 1:
        seq = next(iter(calls.values())).seq
        went = transitions(group, snapshots, seq)
        likely = [text for line, gone_on, text in said
                  if all((went_from(snapshots.get(rank), group, seq), line) in went for rank in gone_on)]
        return likely[0] if len(likely) == 1 else ""
    return said[0][2] if said else ""


def went_from(snapshot: Optional[RankSnapshot], group: str, seq: int) -> Optional[str]:
    """The line of ``snapshot``'s call ``seq - 1`` in ``group`` (None where its record has none)."""
    if snapshot is None:
        return None
    return next((c.at for c in snapshot.collectives if c.group == group and c.seq == seq - 1), None)


def transitions(group: str, snapshots: dict[int, RankSnapshot], seq: int) -> set[tuple[str, str]]:
    """Every (line, next line) that a rank went from one call of ``group`` to its next by, before
    call ``seq``, in the records."""
    went = set()
    for snapshot in snapshots.values():
        lines = {c.seq: c.at for c in snapshot.collectives if c.group == group and c.seq < seq}
        went |= {(lines[n], lines[n + 1]) for n in lines if n + 1 in lines}
    return went


def step_counts(passes: dict[int, tuple[str, str]], others: list[int], counts: dict[int, dict[str, int]],
                instead: Optional[Collective] = None, never_made: bool = False) -> str:
    """``rank 1 is in backward pass 31 at train.py:12, where rank 0 made 30: ``: how many passes
    each rank made from the line where the ranks in a training step (``passes``: each one's line
    and pass) are, by its counts of that pass (``counts``: by line); without the others' part
    where a count of theirs is not known (a rank that did not answer, a record without that line)
    or they differ; "" where the ranks in a step are at different lines, or their own counts
    differ or are not known. ``instead``: the call the others all made in its place (``and called
    barrier() at train.py:40 in its place``: they may have gone on past it since), said to be likely
    the extra one where the ranks in the step never made a collective from its line
    (``never_made``); where the others made as many passes, the extra call set every collective
    after it one apart, and that is said instead of a count that differs."""
    if len(set(passes.values())) != 1:
        return ""
    line, kind = next(iter(passes.values()))
    now = {counts.get(rank, {}).get(line) for rank in passes}
    made = {counts.get(rank, {}).get(line) for rank in others}
    if len(now) != 1 or None in now:
        return ""
    verb = "is" if len(passes) == 1 else "are"
    who = ranks_text(sorted(others))
    count = now.pop()
    theirs = made.pop() if len(made) == 1 else None  # (None: a count not known)
    where = f", where {who} made {theirs}" if theirs is not None else ""
    end = ": "
    one = len(others) == 1
    if instead is not None and never_made and theirs == count:  # as many steps: the extra call shifted the rest
        return (f"{ranks_text(sorted(passes))} {verb} in {kind} {count} at {line}, and {who} made {count} too, one"
                f" collective apart: {who} called {instead.call} at {instead.at} before {'it' if one else 'them'},"
                f" which {ranks_text(sorted(passes))} never made: likely an extra collective {who}"
                f" {'makes' if one else 'make'} on {'its' if one else 'their'} own within a step, which set every"
                " collective after it one apart; ")
    if instead is not None:
        where += (f" and called {instead.call} at {instead.at} in its place" if where
                  else f", while {who} called {instead.call} at {instead.at} in its place")
        if never_made:
            where += (f", which {ranks_text(sorted(passes))} never made: likely the extra collective (one {who}"
                      f" {'makes' if one else 'make'} on {'its' if one else 'their'} own within a step, or one after"
                      f" {'its' if one else 'their'} training loop, which {'it' if one else 'they'} left first)")
            end = "; "
    return f"{ranks_text(sorted(passes))} {verb} in {kind} {count} at {line}{where}{end}"


def roots_alone_differ(calls: dict[int, Collective]) -> bool:
    """Whether ``calls``, one collective as each rank made it, differ in their root alone (the
    same op and tensors)."""
    split = [(c.op, c.shapes[:m.start()], m.group(0)) if (m := ROOT_TEXT.search(c.shapes)) else None
             for c in calls.values()]
    if None in split:
        return False
    return len({(op, moved) for op, moved, _ in split}) == 1 and len({root for _, _, root in split}) > 1


def unmatched_p2p(snapshots: dict[int, RankSnapshot], expected: set[int], absent_why: dict[int, str],
                  elsewhere: Optional[dict[int, str]] = None) -> Optional[Divergence]:
    """Step 2: a rank that waits in a send its peer has not received (or a receive its peer has
    not sent), followed along the peers it waits for: how many each did, and where the last one
    is instead (in a collective, with who of its group is not there; stopped; or waiting back
    for the first: a cycle)."""
    for rank in sorted(snapshots):
        text = waits_for_peer(rank, snapshots, expected, absent_why, elsewhere, [])
        if text:
            waiting = snapshots[rank].in_collective
            assert waiting is not None
            found = Divergence("p2p", f"rank {rank} {text}", waiting.seq, waiting.group,
                              CYCLE_HINT if text.endswith(CYCLE) else "")
            return found if found.hint else replace(found, hint=misdirected(snapshots))
    return None


def misdirected(snapshots: dict[int, RankSnapshot]) -> str:
    """Where a rank waits in a send to a peer that waits in a receive from a third rank (or in a
    receive from a peer that waits in a send to a third): that one of the two names the wrong rank
    (``dist.recv(buf, src=1)`` where rank 0 sends), or that the two are made in the wrong order;
    "" otherwise."""
    waiting = {rank: (s.in_collective, channel_ends(s.in_collective.group)) for rank, s in snapshots.items()
               if s.in_collective is not None and channel_ends(s.in_collective.group) is not None}
    for rank, (call, (sender, receiver)) in sorted(waiting.items()):
        sends = rank == sender
        peer = receiver if sends else sender
        if peer is None or peer == rank or peer not in waiting:
            continue
        theirs, (their_sender, their_receiver) = waiting[peer]
        # the peer is at the other end of a transfer of its own: a receive (a send) with a third rank
        other = their_sender if sends and their_receiver == peer else their_receiver if their_sender == peer and not sends else None
        if other is None or other in (rank, peer):
            continue
        # the records cannot tell a wrong rank from a right one in the wrong order: rank 2 receives
        # from rank 1 first, and rank 1 sends only after a barrier rank 0 waits to reach (a review)
        if sends:
            what = (f"rank {rank} sends to rank {peer} ({call.call} at {call.at}), and rank {peer} waits to receive"
                    f" from rank {other} instead ({theirs.call} at {theirs.at})")
            order = f"rank {peer} receives from rank {other} before rank {rank}, and rank {other} sends later"
        else:
            what = (f"rank {rank} receives from rank {peer} ({call.call} at {call.at}), and rank {peer} waits to send"
                    f" to rank {other} instead ({theirs.call} at {theirs.at})")
            order = f"rank {peer} sends to rank {other} before rank {rank}, and rank {other} receives later"
        return (f"{what}: one of the two names the wrong rank, or they are in the wrong order ({order}: make them"
                f" in the order the peers do, or start them with dist.isend and dist.irecv and wait on both); a"
                f" send's dst and a recv's src are global ranks, and a send is received only by a recv from its own"
                f" rank (src=None receives from any)")
    return ""


def waits_for_peer(rank: int, snapshots: dict[int, RankSnapshot], expected: set[int], absent_why: dict[int, str],
                   elsewhere: Optional[dict[int, str]], seen: list[int]) -> Optional[str]:
    """``waits in send(...) #5 to rank 1 at ...; rank 1 received 4 and ...`` when ``rank`` waits
    in a transfer its peer has not reached (None otherwise)."""
    waiting = snapshots[rank].in_collective
    ends = channel_ends(waiting.group) if waiting is not None else None
    if waiting is None or ends is None or not compared(waiting.group, snapshots):
        return None
    sender, receiver = ends
    peer = receiver if rank == sender else sender
    if peer is None or peer == rank:
        return None
    sends = rank == sender
    head = f"waits in {waiting.call} #{waiting.seq} {'to' if sends else 'from'} rank {peer} at {waiting.at}"
    if peer not in snapshots:
        return f"{head}; rank {peer} {absent_why.get(peer, 'did not answer')}" if peer in expected else None
    theirs = by_group(snapshots[peer]).get(waiting.group, {})
    if theirs and max(theirs) >= waiting.seq:
        return None  # the peer is in it too, or past it
    count = f" {'received' if sends else 'sent'} {max(theirs)} and" if theirs else ""
    if peer in seen:
        return f"{head}: {CYCLE}"
    onward = waits_for_peer(peer, snapshots, expected, absent_why, elsewhere, [*seen, rank])
    if onward:
        return f"{head}; rank {peer}{count} {onward}"
    there = snapshots[peer].in_collective
    absent = "; ".join(not_there(there, snapshots, expected, absent_why, elsewhere, {*seen, rank})) if there else ""
    return f"{head}; rank {peer}{count} {where_it_is(snapshots[peer], peer, elsewhere)}" + (f"; {absent}" if absent else "")


def where_it_is(snapshot: RankSnapshot, rank: int, elsewhere: Optional[dict[int, str]] = None) -> str:
    """``waits in all_reduce(float32[8]) #1 at train.py:14``, or ``is not in a collective: ...``."""
    waiting = snapshot.in_collective
    if waiting is not None:
        return f"waits in {waiting.where}" + (", on the GPU" if waiting.on_gpu else "")
    if snapshot.stack:
        return f"is not in a collective: {rank_summary(snapshot)}{(elsewhere or {}).get(rank, '')}"
    return "is not in a collective"


def waiting_in_different_groups(snapshots: dict[int, RankSnapshot]) -> Optional[Divergence]:
    """Step 3: ranks that wait in collectives of different process groups (point-to-point
    channels are step 2's)."""
    waiting = {rank: s.in_collective for rank, s in snapshots.items()
               if s.in_collective is not None and channel_ends(s.in_collective.group) is None}
    groups: dict[str, list[int]] = {}
    for rank, collective in waiting.items():
        assert collective is not None
        groups.setdefault(collective.group, []).append(rank)
    if len(groups) < 2:
        return None
    parts = []
    for group, ranks in sorted(groups.items(), key=lambda item: min(item[1])):
        collective = waiting[min(ranks)]
        assert collective is not None
        parts.append(f"{ranks_text(ranks)} {'waits' if len(ranks) == 1 else 'wait'} in {collective.call} #{collective.seq} of group {group} at"
                     f" {collective.at}")
    return Divergence("groups", "the ranks wait in different process groups: " + "; ".join(parts), hint=GROUPS_HINT)


def missing(snapshots: dict[int, RankSnapshot], expected: set[int], absent_why: dict[int, str],
            elsewhere: Optional[dict[int, str]] = None) -> Optional[Divergence]:
    """Step 4: where the waiting ranks wait, and who of that group is not there (behind, or not
    answering); ``elsewhere``: what a rank outside any collective waits for, past its own stack."""
    waiting = {rank: s.in_collective for rank, s in snapshots.items() if s.in_collective is not None}
    if not waiting:
        return None
    # a process group's collective names its absent members; a transfer under way has its two
    in_groups = [rank for rank, c in waiting.items() if c is not None and channel_ends(c.group) is None]
    target = waiting[min(in_groups or waiting)]
    assert target is not None
    there = sorted(r for r, c in waiting.items() if c is not None and (c.group, c.seq) == (target.group, target.seq))
    behind = not_there(target, snapshots, expected, absent_why, elsewhere)
    if not behind:
        return None
    where = "" if target.group == "default" else f" of group {target.group}"
    text = f"{ranks_text(there)} {'waits' if len(there) == 1 else 'wait'} in {target.call} #{target.seq}{where} at {target.at}; " + "; ".join(behind)
    return Divergence("missing", text, target.seq, target.group)


def not_there(target: Collective, snapshots: dict[int, RankSnapshot], expected: set[int], absent_why: dict[int, str],
              elsewhere: Optional[dict[int, str]] = None, named: set[int] = frozenset()) -> list[str]:
    """Who of ``target``'s group has not reached it: the members behind in it (``rank 1 is at
    #56 (...)``), and those that did not answer; not the ranks already ``named``. For a transfer,
    only who did not answer: its two ends, or anyone when one end is any rank."""
    ends = channel_ends(target.group)
    everyone = set(snapshots) | expected
    involved = (group_members(target.group, everyone) if ends is None or None not in ends else everyone) - set(named)
    behind: dict[int, str] = {}
    for rank in sorted(set(snapshots) & involved) if ends is None else []:
        mine = by_group(snapshots[rank]).get(target.group, {})
        last = max(mine) if mine else 0
        if last < target.seq:
            where = snapshots[rank].in_collective
            outside = f"not in a collective: {rank_summary(snapshots[rank])}{(elsewhere or {}).get(rank, '')}"
            doing = (f"in {where.call} #{where.seq} of group {where.group}" if where
                     else outside if snapshots[rank].stack else "not in a collective")
            behind[rank] = f"at #{last} ({doing})"
    # ranks at one place together: ``ranks 2, 3 are at #0 (...)`` (why a rank is silent is its own)
    return ([f"{ranks_text(ranks)} {'is' if len(ranks) == 1 else 'are'} {text}" for ranks, text in alike(behind)]
            + [f"rank {rank} {absent_why.get(rank, 'did not answer')}"
               for rank in sorted((expected & involved) - set(snapshots))])


def first_divergence(snapshots: dict[int, RankSnapshot], expected: Optional[set[int]] = None,
                     absent_why: Optional[dict[int, str]] = None,
                     elsewhere: Optional[dict[int, str]] = None) -> Optional[Divergence]:
    """The first place the ranks' collectives part (see the module's steps), or None when they
    agree and everyone expected is there (``elsewhere``: see :func:`missing`)."""
    everyone = set(expected or snapshots)
    return (mismatch(snapshots) or unmatched_p2p(snapshots, everyone, absent_why or {}, elsewhere)
            or waiting_in_different_groups(snapshots) or missing(snapshots, everyone, absent_why or {}, elsewhere))


def ended_apart(ended: dict[int, dict]) -> str:
    """For a run whose every rank's script returned: where the ranks made different numbers of
    collectives in a process group every rank belongs to (``ended``: each rank's
    ``collective_log.at_end``), how many each made and the first call where their records part;
    "" where they agree, or where nothing can be compared rightly: a rank that did not say, ranks
    renumbered by an elastic restart (their worlds differ from the ranks that said), subgroups of
    some ranks (only members call them) and point-to-point channels (left out by the workers)."""
    ranks = set(ended)
    if len(ranks) < 2 or ranks != set(range(len(ranks))) or any(
            str(e.get("world")) != str(len(ranks)) or not isinstance(e.get("counts"), dict) for e in ended.values()):
        return ""
    for group in sorted({g for e in ended.values() for g in e["counts"]}):
        named = members_named(group)
        if channel_ends(group) is not None or (named is None and group != "default") or (named and named != ranks):
            continue
        made = {rank: int(e["counts"].get(group, 0)) for rank, e in sorted(ended.items())}
        if len(set(made.values())) < 2:
            continue
        where = "the default group" if group == "default" else f"group {group}"
        counts = ", ".join(f"{ranks_text(r)} made {n}" for r, n in alike({k: str(v) for k, v in made.items()}))
        parted = parted_where(group, ended, made)
        return f"in {where}, the ranks made different numbers of collectives: {counts}{parted}"
    return ""


def parted_where(group: str, ended: dict[int, dict], made: dict[int, int]) -> str:
    """``; they part at collective #13: rank 0 entered ... at e.py:15; rank 1 entered ... at
    e.py:10``: the first of a group's calls the ranks' kept records hold that differs in op,
    what it moved or its line, or else the first call some made and others did not."""
    calls = {rank: {int(c[1]): f"{c[2]}({c[3]}) at {c[4]}" for c in e.get("calls", ())
                    if isinstance(c, list) and len(c) == 5 and c[0] == group} for rank, e in ended.items()}
    if any(not held for held in calls.values()):
        return ""
    floor = max(min(held) for held in calls.values())
    for seq in range(floor, min(made.values()) + 1):
        places = {rank: held.get(seq, "") for rank, held in calls.items()}
        if "" in places.values():
            return ""
        if len(set(places.values())) > 1:
            said = "; ".join(f"{ranks_text(r)} entered {place}" for r, place in alike(places))
            return f"; they part at collective #{seq}: {said}"
    # alike where the records overlap: the extra calls at the end, where the records reach back to the first
    seq = min(made.values()) + 1
    extra = {rank: held[seq] for rank, held in calls.items() if seq in held}
    if floor > 1 or not extra:
        return ""
    said = "; ".join(f"{ranks_text(r)} entered {place}" for r, place in alike(extra))
    return f"; the others never made collective #{seq}: {said}"
