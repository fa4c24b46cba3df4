"""``bench ddp``: DDP's overhead per form and regime, and its speed-up (pure summaries of the
figures ``app.bench_ddp`` writes)."""
from __future__ import annotations

from typing import Optional

from orchestrate.bench.artifacts import link_lines
from orchestrate.text import counted

DDP_SPEEDUP_GOAL = 1.5  # DDP over one all_reduce per parameter
# DDP's overhead over no DDP at world size 1 on a GPU-bound batch (PyTorch's own benchmark: ~3%)
OVERHEAD_GOAL = 0.03


def ddp_summary(run: dict, link: str = "") -> dict:
    """Per batch size: each form's overhead against no DDP, the best DDP form, scaling
    efficiency and DDP's speed-up over the naive form; and the overhead goal's verdict (and the
    run's ``--link``, "" for none)."""
    batches = []
    for batch in sorted({f.get("batch_size", 0) for f in run["forms"]}):
        forms = {f["form"]: f for f in run["forms"] if f.get("batch_size", 0) == batch}
        local = forms["local"]["step_s"]
        ddp = [f for name, f in forms.items() if name.startswith("ddp-") and name != "ddp-noop"]
        best = min(ddp, key=lambda f: f["step_s"])
        naive = forms["naive"]["step_s"] if "naive" in forms else None
        batches.append({
            "batch_size": batch, "regime": (run.get("regimes") or {}).get(str(batch), "unknown"),
            "overheads": {name: f["step_s"] / local - 1 for name, f in forms.items() if name != "local"},
            "best_ddp": best["form"], "overhead": best["step_s"] / local - 1,
            "scaling_efficiency": local / best["step_s"],
            "speedup_over_naive": naive / best["step_s"] if naive else None})
    return dict(run, link=link, batches=batches, goal=overhead_goal(run, batches))


def overhead_goal(run: dict, batches: list[dict]) -> dict:
    """The ≤3% goal: judged on a GPU-bound batch at world size 1 only (elsewhere it says
    what the run would need)."""
    gpu_bound = [b for b in batches if b["regime"] == "gpu-bound"]
    if run.get("world_size") != 1 or not gpu_bound:
        need = (f"world size 1 (it has {run.get('world_size')})" if run.get("world_size") != 1
                else "a GPU-bound batch (a GPU, and --sweep)")
        return {"judged": False, "why_not": f"judged at world size 1 on a GPU-bound batch; this run lacks {need}"}
    batch = max(gpu_bound, key=lambda b: b["batch_size"])
    form = min(batch["overheads"], key=lambda name: batch["overheads"][name] if name.startswith("ddp-")
               and name != "ddp-noop" else float("inf"))
    overhead = batch["overheads"][form]
    return {"judged": True, "met": overhead <= OVERHEAD_GOAL, "form": form, "overhead": overhead,
            "batch_size": batch["batch_size"]}


def ddp_rows(summaries: list[dict]) -> list[dict]:
    """The rows of the table, one per run, batch size and form: its ``nodes``, ``world``,
    ``batch``, ``regime`` and ``form``, its step time (``step_s``), what DDP or communication
    added to it over no DDP (``exposed_comm_s``, 0 or more) and its step time over no DDP's
    (``vs_local``). :func:`format_ddp` prints them; bench.json keeps them as its ``results``,
    which the report page shows as its bench table."""
    rows = []
    for s in summaries:
        for batch in s["batches"]:
            forms = [f for f in s["forms"] if f.get("batch_size", 0) == batch["batch_size"]]
            local = next(f["step_s"] for f in forms if f["form"] == "local")
            rows += [{"nodes": s["nodes"], "world": s.get("world_size", s["nodes"]), "batch": batch["batch_size"],
                      "regime": batch["regime"], "form": f["form"], "step_s": f["step_s"],
                      "exposed_comm_s": max(0.0, f["step_s"] - local), "vs_local": f["step_s"] / local}
                     for f in forms]
    return rows


def format_ddp(summaries: list[dict]) -> str:
    link = (summaries[0].get("link") or "") if summaries else ""  # one bench's runs share one --link
    lines = [*link_lines(link),
             (f"{'nodes':>5} {'world':>5} {'batch':>5} {'regime':<12} {'form':<12} {'step (ms)':>10}"
              f" {'exposed comm (ms)':>18} {'vs local':>9}")]
    for r in ddp_rows(summaries):
        lines.append(f"{r['nodes']:>5} {r['world']:>5} {r['batch']:>5} {r['regime']:<12} {r['form']:<12}"
                     f" {r['step_s'] * 1e3:>10.1f} {r['exposed_comm_s'] * 1e3:>18.1f} {r['vs_local']:>8.3f}x")
    for s in summaries:
        for batch in s["batches"]:
            lines.append(batch_line(s, batch))
        goal = s["goal"]
        if goal["judged"]:
            lines.append(f"goal: DDP's overhead at world size 1 on a GPU-bound batch <= {OVERHEAD_GOAL:.0%}:"
                         f" {'met' if goal['met'] else 'missed'} by {goal['form']} at batch {goal['batch_size']}"
                         f" ({goal['overhead']:+.1%})")
        else:
            lines.append(f"goal (<= {OVERHEAD_GOAL:.0%} DDP overhead): not judged: {goal['why_not']}")
    return "\n".join(lines)


def batch_line(run: dict, batch: dict) -> str:
    """One batch size of one run, in words: every form's overhead, and the speed-up over naive."""
    overheads = batch["overheads"]
    noop: Optional[float] = overheads.get("ddp-noop")
    nodes = counted(run["nodes"], "node")
    parts = [f"{nodes} (world {run.get('world_size', run['nodes'])}), batch {batch['batch_size']}"
             f" ({batch['regime']}): DDP's overhead over no DDP " + ", ".join(
                 f"{name} {value:+.1%}" for name, value in overheads.items() if name.startswith("ddp-"))]
    if noop is not None:
        parts.append(f"of which bookkeeping (ddp-noop, no communication) {noop:+.1%}")
    speedup = batch["speedup_over_naive"]
    if run.get("world_size") == 1:
        parts.append("world size 1: nothing to communicate, so every form's cost is DDP's own work")
    elif speedup is not None:
        verdict = "meets" if speedup >= DDP_SPEEDUP_GOAL else "misses"
        parts.append(f"best DDP ({batch['best_ddp']}) {speedup:.2f}x faster than one all_reduce per parameter"
                     f" ({verdict} the {DDP_SPEEDUP_GOAL}x goal; {run['parameter_tensors']} tensors), scaling"
                     f" efficiency {batch['scaling_efficiency']:.0%}")
    return "; ".join(parts)
