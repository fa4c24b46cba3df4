"""``bench collectives``: busbw against the wire (pure summaries of the figures)."""
from __future__ import annotations

from orchestrate.bench.artifacts import link_lines
from orchestrate.text import check_word, format_bandwidth, format_bytes

# The goals, printed next to the figures.
ALLREDUCE_GOAL_FRACTION = 0.60  # gloo all_reduce busbw at 64 MB, of one TCP stream, 2 nodes


def collectives_summary(results: dict, link: str = "") -> dict:
    """Add the wire fractions (busbw / one TCP stream) and the 64 MB all_reduce verdict, and
    the same all_reduce against the wire both ways at once (the most a ring can use)."""
    summary = dict(results, link=link)
    wire = results.get("wire") or {}
    single, both = wire.get("single_stream_Bps"), wire.get("both_ways_Bps")
    for row in summary["results"]:
        row["of_wire"] = row["busbw_Bps"] / single if single else None
    at_64mb = [r for r in summary["results"] if r["op"] == "all_reduce" and r["size"] == 64 << 20]
    summary["all_reduce_64MB_of_wire"] = at_64mb[0]["of_wire"] if at_64mb and single else None
    # With one process per node the ring's two directions are the one pair's: its ceiling. With
    # more, both-ways is summed over the pairs and bounds no single rank's busbw.
    ceiling = both if wire.get("pairs") == 1 else None
    summary["all_reduce_64MB_of_both_ways"] = at_64mb[0]["busbw_Bps"] / ceiling if at_64mb and ceiling else None
    summary["both_ways_of_single_stream"] = both / single if both and single else None
    return summary


def format_collectives(summary: dict) -> str:
    wire = summary.get("wire") or {}
    lines = [*link_lines(summary.get("link") or ""),
             (f"{'op':<15} {'size':>10} {'time (us)':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}"
              f" {'of wire':>8} {'check':>6}")]
    for r in summary["results"]:
        fraction = "-" if r.get("of_wire") is None else f"{r['of_wire']:.0%}"
        lines.append(f"{r['op']:<15} {format_bytes(r['size'], upper=True):>10} {r['time_s'] * 1e6:>11.1f}"
                     f" {r['algbw_Bps'] / 1e9:>11.3f} {r['busbw_Bps'] / 1e9:>11.3f} {fraction:>8}"
                     f" {check_word(r['ok']):>6}")
    if wire:
        both = wire.get("both_ways_Bps")
        lines.append(f"wire: one TCP stream {format_bandwidth(wire['single_stream_Bps'])};"
                     f" {wire['pairs']} at once {format_bandwidth(wire['per_pair_Bps'])}"
                     + (f"; both ways at once {format_bandwidth(both)} each way"
                        f" ({summary['both_ways_of_single_stream']:.0%} of one stream)" if both else ""))
    fraction = summary.get("all_reduce_64MB_of_wire")
    if fraction is not None:
        verdict = "meets" if fraction >= ALLREDUCE_GOAL_FRACTION else "misses"
        line = (f"all_reduce busbw at 64 MB: {fraction:.0%} of one TCP stream ({verdict} the"
                f" {ALLREDUCE_GOAL_FRACTION:.0%} goal)")
        if summary.get("all_reduce_64MB_of_both_ways") is not None:
            line += f"; {summary['all_reduce_64MB_of_both_ways']:.0%} of the wire both ways, its ceiling"
        lines.append(line)
    return "\n".join(lines)
