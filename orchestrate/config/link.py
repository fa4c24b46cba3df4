"""Realistic links: ``--link rate=10gbit[,delay=5ms][,loss=0.1%]`` or a preset like ``10gbe``.

Pure parsing and rendering: :func:`tc_commands` gives the Linux traffic-control commands that
shape a node's interface (``tbf`` for the rate, ``netem`` for delay and loss, ``tbf`` under
it when both). Each node shapes what it sends, so every direction of every link is shaped.
The node supervisor runs them as root with ``NET_ADMIN`` (added to shaped runs only) and
drops to the user's uid before torchrun starts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from orchestrate.errors import UsageError

# name -> spec; rates as Ethernet and InfiniBand generations name them
PRESETS = {
    "1gbe": "rate=1gbit",
    "10gbe": "rate=10gbit",
    "25gbe": "rate=25gbit",
    "100gbe": "rate=100gbit",
    "ib-hdr": "rate=200gbit",
    "wan": "rate=100mbit,delay=20ms",
}
USAGE = ("usage: --link rate=10gbit[,delay=5ms][,loss=0.1%] or a preset (" + ", ".join(PRESETS) + ")")
# tc reads "bit" as bits and "bps" as BYTES per second: "bps" is matched only to be refused
_RATE = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[kmg]?)(?P<per>bit|bps)$", re.I)
_RATE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}
_DELAY = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>us|ms|s)$")
_DELAY_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}
_LOSS = re.compile(r"^(?P<n>\d+(?:\.\d+)?)%$")


@dataclass(frozen=True)
class LinkSpec:
    """How every node's link is shaped.

    Attributes:
        rate_bits: Bits per second each node may send (None: unshaped).
        delay_ms: One-way delay added to every packet a node sends.
        loss_pct: Percentage of packets a node's link drops.
        preset: The preset's name where the user gave one (``wan``), to name it as typed; "" otherwise.
    """

    rate_bits: Optional[int] = None
    delay_ms: float = 0.0
    loss_pct: float = 0.0
    preset: str = field(default="", compare=False)

    @property
    def needs_netem(self) -> bool:
        return bool(self.delay_ms or self.loss_pct)

    def __str__(self) -> str:
        parts = []
        if self.rate_bits:
            parts.append(f"rate={format_rate(self.rate_bits)}")
        if self.delay_ms:
            parts.append(f"delay={self.delay_ms:g}ms")
        if self.loss_pct:
            parts.append(f"loss={self.loss_pct:g}%")
        return ",".join(parts)


def format_rate(bits: int) -> str:
    for unit, size in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bits >= size and bits % size == 0:
            return f"{bits // size}{unit}"
    return f"{bits}bit"


def parse_link(text: str) -> LinkSpec:
    """Parse ``--link``.

    Raises:
        UsageError: Quoting the value and the usage.
    """
    preset = text.strip().lower() if text.strip().lower() in PRESETS else ""
    spec_text = PRESETS.get(preset, text.strip())
    fields: dict[str, str] = {}
    for part in filter(None, spec_text.split(",")):
        key, sep, value = part.partition("=")
        if not sep or key not in ("rate", "delay", "loss") or key in fields:
            raise UsageError(f"invalid --link {text!r}: {USAGE}")
        fields[key] = value.strip()
    if not fields:
        raise UsageError(f"invalid --link {text!r}: {USAGE}")
    rate_bits = delay = loss = None
    if "rate" in fields:
        rate_bits = parse_rate(fields["rate"], "--link rate")
    if "delay" in fields:
        delay = _DELAY.match(fields["delay"])
        if not delay:
            raise UsageError(f"invalid --link delay {fields['delay']!r}: expected e.g. 500us, 5ms")
    if "loss" in fields:
        loss = _LOSS.match(fields["loss"])
        if not loss or float(loss["n"]) >= 100:
            raise UsageError(f"invalid --link loss {fields['loss']!r}: expected a percentage below 100, e.g. 0.1%")
    spec = LinkSpec(
        rate_bits=rate_bits,
        delay_ms=float(delay["n"]) * _DELAY_UNITS[delay["unit"]] if delay else 0.0,
        loss_pct=float(loss["n"]) if loss else 0.0,
        preset=preset,
    )
    if not (spec.rate_bits or spec.needs_netem):  # it would give the nodes NET_ADMIN, and no rule
        raise UsageError(f"invalid --link {text!r}: it shapes nothing (a delay of 0 delays nothing, a loss of 0% drops"
                         " nothing); leave --link out for the bridge's own link, or give a rate, or a delay or loss"
                         " above 0")
    return spec


def parse_rate(text: str, option: str) -> int:
    """A rate such as ``100mbit`` or ``1gbit``, in bits per second. ``bps`` is refused: tc reads
    it as bytes per second, many people as bits, so either reading would surprise someone.

    Raises:
        UsageError: Naming ``option``.
    """
    rate = _RATE.match(text.strip())
    bits = int(float(rate["n"]) * _RATE_UNITS[rate["unit"].lower()]) if rate else 0
    if bits < 1:  # (0.5bit is 0 bits: an unshaped link, or a tbf the kernel refuses)
        raise UsageError(f"invalid {option} {text!r}: expected e.g. 100mbit, 1gbit, 10gbit")
    if rate["per"].lower() == "bps":  # a tc user's 1gbps is a gigabyte a second; others mean a gigabit
        raise UsageError(f"invalid {option}={text.strip()}: tc reads bps as bytes per second; write"
                         f" rate={format_rate(bits * 8)}, or rate={rate['n']}{rate['unit'].lower()}bit for bits")
    return bits


def tbf_burst_bytes(rate_bits: int) -> int:
    """Bucket size of a ``tbf`` at ``rate_bits``: 4 ms of traffic, at least 32 KB (the kernel
    refills the bucket once per timer tick, so a smaller one cannot reach the rate)."""
    return max(32 * 1024, rate_bits // 8 // 250)


def loss_rule(interface: str, loss_pct: float) -> list[str]:
    """The iptables rule (after ``-A``/``-D``) that drops ``loss_pct`` % of the packets coming
    in on ``interface`` at random (the ``statistic`` match: no netem needed). Each node drops on
    its own way in, so every link between two nodes loses in both directions."""
    return ["INPUT", "-i", interface, "-m", "statistic", "--mode", "random", "--probability",
            f"{loss_pct / 100:.6g}", "-j", "DROP"]


def link_commands(spec: LinkSpec, interface: str, netem: bool = True) -> list[list[str]]:
    """Every command that gives ``interface`` the link ``spec`` (pure): :func:`tc_commands`,
    and where the kernel has no netem (``netem`` False) the loss as an iptables rule."""
    if netem or not spec.loss_pct:
        return tc_commands(spec, interface, netem)
    return [*tc_commands(spec, interface, netem), ["iptables", "-w", "-A", *loss_rule(interface, spec.loss_pct)]]


def tc_commands(spec: LinkSpec, interface: str, netem: bool = True, verb: str = "add") -> list[list[str]]:
    """The ``tc`` commands that shape ``interface`` to ``spec`` (pure); without ``netem``, the
    loss is left to :func:`link_commands`' iptables rule (and a delay cannot be had). ``verb``:
    ``add`` to a bare interface, or ``replace`` what it has (each qdisc by its handle)."""
    commands: list[list[str]] = []
    parent = ["root"]
    if spec.needs_netem and netem:
        qdisc = ["tc", "qdisc", verb, "dev", interface, "root", "handle", "1:", "netem"]
        if spec.delay_ms:
            qdisc += ["delay", f"{spec.delay_ms:g}ms"]
        if spec.loss_pct:
            qdisc += ["loss", f"{spec.loss_pct:g}%"]
        commands.append(qdisc)
        parent = ["parent", "1:", "handle", "2:"]
    if spec.rate_bits:
        commands.append(["tc", "qdisc", verb, "dev", interface, *parent, "tbf",
                         "rate", format_rate(spec.rate_bits), "burst", str(tbf_burst_bytes(spec.rate_bits)),
                         "latency", "100ms"])
    return commands


def degrade_commands(rate_bits: int, link: Optional[LinkSpec], interface: str, netem: bool = True) -> list[list[str]]:
    """The ``tc`` commands that degrade ``interface``'s rate to ``rate_bits`` (pure), its link
    (``--link``) otherwise kept: where the link's delay or loss is netem's (``netem``), netem
    stays the root and the degraded rate its child, so that the delay and loss go on while the
    rate is down (a tbf in the root's place took them away: a faster link, not a slower one);
    else the rate is the root's."""
    degraded = LinkSpec(rate_bits, link.delay_ms, link.loss_pct) if link is not None else LinkSpec(rate_bits)
    return tc_commands(degraded if netem else LinkSpec(rate_bits), interface, netem, verb="replace")


# What a kernel without netem answers (seen: "Specified qdisc kind is unknown").
NETEM_MISSING = re.compile(r"qdisc kind is unknown|No such file or directory|Operation not supported", re.I)


def netem_missing_message(spec: LinkSpec, tc_stderr: str) -> str:
    """The one line that refuses ``delay=`` where the kernel has no netem (a loss is dropped by
    iptables instead: :func:`link_commands`): it names the link as the user gave it (a preset by its
    name, and what it means) and suggests the same link without its delay."""
    reason = tc_stderr.strip().splitlines()[-1] if tc_stderr.strip() else "netem unavailable"
    given = f"--link {spec.preset}, which is {spec}," if spec.preset else f"--link delay={spec.delay_ms:g}ms"
    undelayed = str(LinkSpec(spec.rate_bits, 0.0, spec.loss_pct))
    return (f"{given} needs the kernel's netem qdisc, which this kernel lacks (tc: {reason}): nothing else delays"
            " every packet without a userspace queue that would cap the link far below its rate; shape the rate and"
            f" loss only ({f'--link {undelayed}' if undelayed else 'e.g. --link rate=1gbit,loss=1%'}), or load"
            " sch_netem on the host")


