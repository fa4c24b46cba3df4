"""``bench ddp``: DDP's overhead and speed-up (pure summaries of the figures)."""
from __future__ import annotations

DDP_SPEEDUP_GOAL = 1.5  # DDP over one all_reduce per parameter


def ddp_summary(run: dict) -> dict:
    """Overhead against no DDP, scaling efficiency, and DDP's speed-up over the naive form."""
    forms = {f["form"]: f for f in run["forms"]}
    local = forms["local"]["step_s"]
    ddp = [f for f in run["forms"] if f["form"].startswith("ddp-")]
    best = min(ddp, key=lambda f: f["step_s"])
    naive = forms["naive"]["step_s"]
    return dict(run, best_ddp=best["form"], overhead=best["step_s"] / local - 1,
                scaling_efficiency=local / best["step_s"], speedup_over_naive=naive / best["step_s"],
                default_bucket_speedup=(naive / forms["ddp-25MB"]["step_s"]) if "ddp-25MB" in forms else None)


def format_ddp(summaries: list[dict]) -> str:
    lines = [f"{'nodes':>5} {'form':<12} {'step (ms)':>10} {'exposed comm (ms)':>18} {'vs local':>9}"]
    for s in summaries:
        local = s["forms"][0]["step_s"]
        for f in s["forms"]:
            lines.append(f"{s['nodes']:>5} {f['form']:<12} {f['step_s'] * 1e3:>10.1f}"
                         f" {max(0.0, f['step_s'] - local) * 1e3:>18.1f} {f['step_s'] / local:>8.2f}x")
    for s in summaries:
        verdict = "meets" if s["speedup_over_naive"] >= DDP_SPEEDUP_GOAL else "misses"
        lines.append(f"{s['nodes']} nodes: best DDP ({s['best_ddp']}) overhead {s['overhead']:+.0%} over no DDP,"
                     f" scaling efficiency {s['scaling_efficiency']:.0%}, {s['speedup_over_naive']:.2f}x faster than"
                     f" one all_reduce per parameter ({verdict} the {DDP_SPEEDUP_GOAL}x goal;"
                     f" {s['parameter_tensors']} tensors)")
    return "\n".join(lines)
