"""The benchmarks' plots (PNG), drawn with matplotlib, imported only when a plot is drawn."""
from __future__ import annotations

from pathlib import Path

from orchestrate.report.drawing import _pyplot
from orchestrate.text import counted, format_bytes


def link_title(link: str) -> str:
    """What a plot's title adds for the shaped link its figures were measured over (``--link``,
    as :func:`~orchestrate.bench.artifacts.link_lines` says it above the tables): ``, link
    rate=1gbit``; "" for the bridge as it is."""
    return f", link {link}" if link else ""


def plot_collectives(results: dict, path: Path) -> Path:
    """busbw against message size, one line per operation, with the wire's limits as lines."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for op in dict.fromkeys(r["op"] for r in results["results"]):
        rows = [r for r in results["results"] if r["op"] == op]
        ax.plot([r["size"] for r in rows], [r["busbw_Bps"] / 1e9 for r in rows], marker="o", markersize=3, label=op)
    wire = results.get("wire") or {}
    if wire.get("single_stream_Bps"):
        ax.axhline(wire["single_stream_Bps"] / 1e9, color="black", linestyle="--",
                   label=f"one TCP stream ({wire['single_stream_Bps'] / 1e9:.2f} GB/s)")
    if wire.get("both_ways_Bps"):
        ax.axhline(wire["both_ways_Bps"] / 1e9, color="black", linestyle=":",
                   label=f"both ways at once, each way ({wire['both_ways_Bps'] / 1e9:.2f} GB/s)")
    if wire.get("per_pair_Bps") and wire.get("pairs", 1) > 1:
        ax.axhline(wire["per_pair_Bps"] / 1e9, color="gray", linestyle=":",
                   label=f"{wire['pairs']} streams at once ({wire['per_pair_Bps'] / 1e9:.2f} GB/s)")
    if results.get("link"):
        ax.set_title(f"gloo collectives, {results['nodes']} nodes x {results['local_world_size']}"
                     f"{link_title(results['link'])}")
    else:
        ax.set_title(f"gloo collectives, {results['nodes']} nodes x {results['local_world_size']} process(es)")
    ax.set_xscale("log", base=2)
    sizes = sorted({r["size"] for r in results["results"]})
    ax.set_xticks(sizes[::2])
    ax.set_xticklabels([format_bytes(s, upper=True) for s in sizes[::2]], rotation=45)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ddp(runs: list[dict], path: Path) -> Path:
    """Step time per form, for each node count and batch size: compute (the form without DDP)
    and what DDP adds to it."""
    plt = _pyplot()
    panels = [(run, batch) for run in runs for batch in run["batches"]]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 5), squeeze=False)
    for ax, (run, batch) in zip(axes[0], panels):
        forms = [f for f in run["forms"] if f.get("batch_size", 0) == batch["batch_size"]]
        compute = forms[0]["step_s"]
        names = [f["form"] for f in forms]
        exposed = [max(0.0, f["step_s"] - compute) for f in forms]
        ax.bar(names, [compute * 1e3] * len(forms), label="compute (step without DDP)", color="#4c72b0")
        ax.bar(names, [e * 1e3 for e in exposed], bottom=[compute * 1e3] * len(forms),
               label="added by DDP or communication", color="#dd8452")
        ax.set_title(f"{run['model']}, {counted(run['nodes'], 'node')} x {run['local_world_size']},"
                     f" batch {batch['batch_size']} ({batch['regime']}){link_title(run.get('link') or '')}")
        ax.set_ylabel("step time (ms)")
        ax.tick_params(axis="x", rotation=30)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_launcher(results: dict, path: Path) -> Path:
    """Median wall time per launcher, and the phases of the scaling series."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    names = list(results["side_by_side"])
    left.bar(names, [results["side_by_side"][n]["median_s"] for n in names], color="#4c72b0")
    left.set_ylabel("wall time of a 2x2 job (s, median)")
    left.set_title("launcher against a hand-made baseline")
    series = results.get("scaling", [])
    if series:
        nodes = [row["nodes"] for row in series]
        bottom = [0.0] * len(series)
        for phase, color in (("bring_up_s", "#4c72b0"), ("rendezvous_s", "#55a868"), ("rest_of_job_s", "#c44e52"),
                             ("teardown_s", "#8172b2")):
            values = [row.get(phase) or 0.0 for row in series]
            right.bar([str(n) for n in nodes], values, bottom=bottom, label=phase.replace("_s", "").replace("_", " "),
                      color=color)
            bottom = [b + v for b, v in zip(bottom, values)]
        right.set_xlabel("nodes (1 process each)")
        right.set_ylabel("seconds")
        right.set_title("scaling: time per phase")
        right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
