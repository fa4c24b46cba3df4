"""Plain-text helpers shared by every printed table and message."""
from __future__ import annotations

import re
import shutil
import textwrap
from typing import IO, Iterable, Optional


# The width long lines are wrapped to on a terminal where it does not say its own.
TERMINAL_COLUMNS = 100


def for_terminal(text: str, stream: IO[str], prefix: str = "") -> str:
    """``text`` as printed to ``stream``: where that is a terminal, each line longer than its
    width (after ``prefix``, which starts every printed line) wrapped at spaces, its continuation
    lines indented four spaces past the line's own indent (so that a hint of 1,100 characters
    does not wrap as the terminal cuts it); elsewhere (a file, a pipe, a test's
    capture) as it is, one line for one line."""
    isatty = getattr(stream, "isatty", None)
    if isatty is None or not isatty():
        return text
    width = shutil.get_terminal_size((TERMINAL_COLUMNS, 24)).columns - len(prefix)
    out = []
    for line in text.split("\n"):
        if len(line) <= width or width < 40:
            out.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip())]
        out += textwrap.wrap(line.strip(), width, initial_indent=indent, subsequent_indent=indent + "    ",
                             break_long_words=False, break_on_hyphens=False)
    return "\n".join(out)


def first_line(text: str) -> str:
    """Return the first non-empty line of ``text``."""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


# How long an exception's text runs in a one-line description, at most: torch's DDP errors run to
# 400 characters and more in their first line; gloo's, with the path of its source, to some 230,
# where the first ". " comes before the words that say what went wrong, so those stay whole.
BRIEF_CHARS = 300


# How much of its message a cut exception keeps at least, past its name.
BRIEF_MESSAGE_CHARS = 40


def brief(exception: str) -> str:
    """An exception's text for a line that says more beside it: whole where it is short enough;
    else up to the end of its last sentence that ends within :data:`BRIEF_CHARS`, or to the last
    word before them, or into a word too long to end, and " …"; never shorter than the
    exception's name and :data:`BRIEF_MESSAGE_CHARS` of its message. The whole text is in the
    lines shown under the summary and in outcome.json."""
    if len(exception) <= BRIEF_CHARS:
        return exception
    head = exception[:BRIEF_CHARS]
    named = exception.find(": ")
    message_at = named + 2 if 0 < named < BRIEF_MESSAGE_CHARS * 2 else 0
    end = head.rfind(". ")
    if end - message_at >= BRIEF_MESSAGE_CHARS:
        return exception[:end + 1] + " …"
    words = head.rsplit(" ", 1)[0]
    return (words if len(words) - message_at >= BRIEF_MESSAGE_CHARS else head).rstrip(" ,;") + " …"


# torchrun's prefix of a worker's line in its node's output: "[<global rank>|<local rank>]:" as the
# launcher asks (groups rank, local), "[<role><local rank>]:" by default (role, local_rank); never
# torch's own "[rank<N>]:" in an error. The node's console reads its workers' lines by it too.
TORCHRUN_PREFIX = r"\[(?:(?P<rank>\d+)\|(?P<local>\d+)|(?P<role>(?!rank\d)[A-Za-z_]+?)(?P<local_rank>\d+))\]:"
_TORCHRUN_PREFIX = re.compile("^" + TORCHRUN_PREFIX)


def readable_node_line(raw: str) -> str:
    """One raw line of a node's output as a reader of the node's last lines wants it: a worker's
    with ``[rank3] `` (or ``[local1] ``, where the rank is not known) for torchrun's prefix."""
    match = _TORCHRUN_PREFIX.match(raw)
    if match is None:
        return raw
    whose = f"rank{match['rank']}" if match["rank"] is not None else f"local{match['local_rank']}"
    return f"[{whose}] {raw[match.end():]}"


def listed(items: list[str], most: int) -> str:
    """``items`` joined with commas, the first ``most`` of them, and how many more ("a, b and 3
    more")."""
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more


def times(count: int) -> str:
    """``once``, ``2 times``."""
    return "once" if count == 1 else f"{count} times"


def counted(count: int, noun: str, plural: str = "") -> str:
    """``1 node``, ``2 nodes``, ``1 process`` (``plural`` where adding "s" does not make it)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``, ``22nd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def short_duration(seconds: float) -> str:
    """``42s``, ``5m``, ``3h``, ``2d``: whole units, the largest that fits, as ``docker ps`` lists ages."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """Format rows as left-aligned columns under a header and a rule."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header).rstrip(), "  ".join("-" * w for w in widths)]
    out += [fmt.format(*row).rstrip() for row in rows]
    return out


def grace_ran_out(node: str, still_running: list[str], no_grace: bool = False) -> str:
    """The line that names a node whose stop grace ran out, so that it got SIGKILL (``no_grace``:
    its stop gave it none, 0 s: ``stop RUN --timeout 0``, whose SIGKILL came with the SIGTERM, or
    the launcher's own stop under ``--stop-grace 0``, which sends no SIGTERM): said by the launcher
    and by ``stop RUN`` as it happens, and in the run's summary."""
    ran = f"; what still ran: {'; '.join(still_running)}" if still_running else ""
    if no_grace:
        return f"{node} had no grace (its stop gave 0 s), so it got SIGKILL at once{ran}"
    return f"{node} did not stop within its grace after SIGTERM, so it got SIGKILL{ran}"


def ranks_text(ranks: Iterable[int]) -> str:
    """``rank 3``, ``ranks 0-2``, ``ranks 0, 2, 5-7``."""
    ordered = sorted(set(ranks))
    runs: list[list[int]] = []
    for rank in ordered:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    parts = [str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" if len(r) > 2 else f"{r[0]}, {r[1]}" for r in runs]
    return f"{'rank' if len(ordered) == 1 else 'ranks'} {', '.join(parts)}"


def shuffled_alike(line: str, epoch: int, ranks: Iterable[int]) -> str:
    """Why a shuffling DistributedSampler iterated again with the same epoch is a mistake."""
    return (f"{ranks_text(ranks)} iterated a shuffling DistributedSampler at {line} again with its epoch still"
            f" {epoch}: every epoch reads the data in the same order; call sampler.set_epoch(epoch) at the start of"
            " each epoch, before iterating its DataLoader")


def loaded_from_before(paths: Iterable[str]) -> str:
    """The note for files the work directory held before a run that its job then loaded: in the
    run's summary, on its report page, and the ``ddp_cluster`` fixture's warning (one text). It
    states the fact, with advice that fits an earlier run's save and a file shipped for the job to
    load alike. A path with a slash at its end is a checkpoint directory DCP loaded (``dcp.load``)."""
    named = list(paths)
    files = [path for path in named if not path.endswith("/")]
    directories = [path for path in named if path.endswith("/")]
    loads = " and ".join(f"{listed(found, 3)} with {loader}"
                         for found, loader in ((files, "torch.load"), (directories, "dcp.load")) if found)
    return (f"the job loaded {loads}, which its work directory held before this run (an earlier run's"
            " save? where the job should not resume from it, remove it or give each run a directory of its own)")


def written_by_several(path: str, ranks: Iterable[int]) -> str:
    """The warning for a file in a shared directory that several ranks wrote whole: in the
    run's summary and on its report page."""
    return (f"{ranks_text(ranks)} each wrote {path} whole, in a directory every node shares: writers of one file"
            " race, so it holds whichever finished last (parts of each, where they wrote different bytes), and a"
            " rank that reads it meanwhile may find it half-written; write it on one rank (if dist.get_rank() == 0:),"
            " or a file per rank")


# A peer named by its address and port, as gloo names one: ``[172.20.0.3]:12933``, and as its
# connect errors do, with the peer's rank after a dollar sign: ``[172.20.0.3]:30637$2``.
_PEER_ADDRESS = re.compile(r"\[(\d{1,3}(?:\.\d{1,3}){3})\]:(\d+)(?:\$\d+)?")


def peers_named(text: str, node_addresses: dict[str, str]) -> str:
    """``text`` with each peer an address names followed by its node: ``Connection closed by
    peer [172.20.0.3]:12933 (node1)``; an address of no node is left as it is."""
    def name(match: re.Match) -> str:
        node = node_addresses.get(match.group(1))
        return f"{match.group(0)} ({node})" if node else match.group(0)
    return _PEER_ADDRESS.sub(name, text)


def peer_nodes(text: str, node_addresses: dict[str, str]) -> list[str]:
    """The nodes whose addresses ``text`` names as peers (``[172.20.0.3]:12933``), each once, in
    the order named."""
    named = (node_addresses.get(match.group(1)) for match in _PEER_ADDRESS.finditer(text))
    return list(dict.fromkeys(node for node in named if node))


def runs_named(given: str, run_ids: Iterable[str]) -> list[str]:
    """The run ids (``20261201-072714-728639``) that ``given`` names, sorted: itself where it is
    one; else each that starts with it (a unique prefix, as docker takes an id's) or ends with it
    (the id's random last part, ``728639``, the part that tells runs apart). [] for ""."""
    ids = sorted(set(run_ids))
    if not given or given in ids:
        return [given] if given else []
    return [rid for rid in ids if rid.startswith(given) or rid.endswith(given)]


def in_their_middle(given: str, run_ids: Iterable[str]) -> list[str]:
    """The run ids that hold ``given`` only in their middle (``211811`` in
    ``20261206-211811-16df5c``), sorted: it names none of them (see :func:`runs_named`)."""
    return sorted({rid for rid in run_ids
                   if given and given in rid and not rid.startswith(given) and not rid.endswith(given)})


def no_run_named(given: str, where: str, see: str, in_middle: Iterable[str] = ()) -> str:
    """The one-line error for a ``given`` that names no run ``where`` ("in the engine"): that no
    run goes by it there, and ``see``, where to look; or, where run ids hold it in their middle
    (``in_middle``, see :func:`in_their_middle`), which names none, that they do, so that a part
    of an id that looks right is not said to be no run's."""
    middle = sorted(set(in_middle))
    if not middle:
        return f"no run {given} {where} ({see})"
    holds = "has it in its middle" if len(middle) == 1 else "have it in their middles"
    return f"no run id {where} starts or ends with {given} ({listed(middle, 5)} {holds}: give the whole id or its end)"


def several_runs(given: str, matches: list[str], where: str) -> str:
    """The one-line error for a ``given`` that names several runs (``matches``) ``where``."""
    return f"{given!r} names {len(matches)} runs {where}: {listed(matches, 5)}; give more of the run id"


def format_bytes(size: float, upper: bool = False) -> str:
    """A size in bytes in the largest binary unit that holds it whole, as docker takes a memory
    size (``--memory-per-node``): ``2147483648`` -> ``2g``, ``1610612736`` -> ``1536m``, ``1025``
    -> ``1025b``. ``upper``: as the benchmarks take a message size (``--min-size 64M``) and their
    tables and plots show it: ``64M``, ``1536K``, ``4``. The one home of a size's words: the
    summary's and the plan's node memory, ``bench collectives``' table and plot, the report page's
    bench table."""
    whole = int(size)
    for unit, factor in (("g", 1024**3), ("m", 1024**2), ("k", 1024)):
        if whole >= factor and whole % factor == 0:
            return f"{whole // factor}{unit.upper() if upper else unit}"
    return f"{whole}" if upper else f"{whole}b"


def check_word(ok: bool) -> str:
    """What a benchmark's ``check`` column says of a result it checked: ``ok``, or ``WRONG`` (the
    collective's answer was wrong, so its figures measure nothing): ``bench collectives``' table
    and the report page's."""
    return "ok" if ok else "WRONG"


def format_bandwidth(bytes_per_s: float) -> str:
    """``1.2e9`` -> ``1.200 GB/s``: decimal gigabytes a second, as the benchmarks say bandwidth."""
    return f"{bytes_per_s / 1e9:.3f} GB/s"


def format_byte_rate(bytes_per_s: float) -> str:
    """``2.0e6`` -> ``2.0 MB/s``, ``48000`` -> ``48 kB/s``: decimal units, as a slow link moves
    data (a rank's sockets in the hang watchdog's look; a benchmark's bandwidth is
    :func:`format_bandwidth`'s)."""
    return f"{bytes_per_s / 1e6:.1f} MB/s" if bytes_per_s >= 1e6 else f"{bytes_per_s / 1e3:.0f} kB/s"


def format_short_time(seconds: float) -> str:
    """A measured time, in the unit that shows it best: ``7e-05`` -> ``70.0 us``, ``0.0123`` ->
    ``12.3 ms``, ``2.5`` -> ``2.50 s``; none, ``0``, as ``0`` (not ``0.0 us`` beside others in ms)."""
    if seconds == 0:
        return "0"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def node_conditions(link: str = "", cpus_per_node: Optional[float] = None,
                    memory_per_node: Optional[int] = None) -> str:
    """What a run's nodes were given beyond the bridge and the engine's whole host, as the summary
    and the report say it (``link rate=100mbit,delay=20ms; each node 1.5 CPUs, 2g memory``); ""
    where neither a link nor a node size was given."""
    sizes = [f"{cpus_per_node:g} CPU{'' if cpus_per_node == 1 else 's'}" if cpus_per_node else "",
             f"{format_bytes(memory_per_node)} memory" if memory_per_node else ""]
    parts = [f"link {link}" if link else "", "each node " + ", ".join(s for s in sizes if s) if any(sizes) else ""]
    return "; ".join(p for p in parts if p)


# A run whose every rank's script returned, yet whose ranks made different numbers of collectives
# in a group they all belong to: gloo paired the extra one with a peer's next call, whatever it was.
ENDED_APART_HINT = ("every call returned, but gloo pairs a rank's next collective with its peers' next one"
                    " whatever it is, so from there the ranks' calls moved data between different collectives; a"
                    " DDP model's forward pass on one rank alone (an evaluation on rank 0, under no_grad too)"
                    " broadcasts its buffers, a collective the other ranks never make: evaluate model.module"
                    " there, or run the evaluation on every rank")
