"""``chaos``: a resilience check with a verdict. The job undisturbed, then the same job with
faults drawn from a seed (once per trial); exit 0 when it survived them, resumed after a save
and ended where the undisturbed run ended, 1 when not or when the check could not tell
(naming why), 2 for bad input."""
from __future__ import annotations

import argparse
from typing import Any

from orchestrate.chaos.check import ChaosCheck
from orchestrate.chaos.schedule import DEFAULT_KINDS, parse_kinds
from orchestrate.cli.invocation import Invocation
from orchestrate.cli.options import TARGET_HELP, add_options, argparse_type, request_from_args
from orchestrate.cli.signals import install_teardown_signals
from orchestrate.config.options import (
    JOB_HELP_ORDER,
    NODE_OPTIONS,
    OPTIONS_BY_DEST,
    non_negative_float,
    non_negative_int,
    positive_int,
)

# chaos draws the faults, runs on Compose and always elastic: those options are not its to take.
NOT_CHAOS = ("faults", "scheduler", "sbatch", "rdzv")


def add_parsers(sub: Any) -> None:
    chaos = sub.add_parser(
        "chaos", help="a resilience check with a verdict: the job undisturbed, then with faults drawn from a seed",
        description="Run the job undisturbed, then the same job (all runs with the elastic c10d rendezvous, each"
                    " from its own copy of the work directory) with N faults drawn from a seed, once per trial."
                    " Faults fall in training time: at steps (the script's own, or its optimizer's, counted),"
                    " after the job first wrote a file in its work directory; each fault after the first counts"
                    " its steps into the attempt that began after the one before. The verdict holds when the job"
                    " completed, every fault fired, every --compare file matches the undisturbed run's (tensors"
                    " with torch.load, exactly or within --rtol; other files byte for byte), and some attempt"
                    " resumed after a save. It is INCONCLUSIVE (exit 1) when no fault struck after a save (the"
                    " check could not have caught a broken resume), or the job never resumed from what it saved"
                    " and the records cannot tell why (--max-steps-redone N makes that DOES NOT HOLD). A job that"
                    " restarted from the beginning after a fault does not hold where it had saved by torch.save (or"
                    " torch.distributed.checkpoint's save) and no rank loaded a file it had written after the fault"
                    " (its resume never ran), or where it loaded one and still started over.",
        epilog=TARGET_HELP + " Usage example: python -m orchestrate chaos --nodes 2 --faults 2 --seed 7 --compare final.pt --"
               " train.py --epochs 2 --save final.pt")
    add_options(chaos, [OPTIONS_BY_DEST[d] for d in JOB_HELP_ORDER if d not in NOT_CHAOS])
    add_options(chaos.add_argument_group("the user's environment, dependencies and node sizes"), NODE_OPTIONS)
    check = chaos.add_argument_group("the check")
    check.add_argument("--faults", dest="fault_count", type=argparse_type(positive_int, "--faults"), default=1,
                       metavar="N", help="faults to inject into each disturbed run (default: 1)")
    check.add_argument("--seed", type=argparse_type(non_negative_int, "--seed"), default=0,
                       help="the seed the schedule is drawn from; the same seed gives the same schedule (default: 0)")
    check.add_argument("--kinds", type=argparse_type(parse_kinds, "--kinds"), default=DEFAULT_KINDS,
                       metavar="KIND[,KIND...]",
                       help="fault kinds to draw from, e.g. kill,restart,preempt,disconnect, or torn-write (a save cut short,"
                            " on node0), or pause:store, disconnect:store (the rendezvous host hung or cut off for 5-10 s:"
                            " every run then keeps its store in a container, --rdzv-store container; kill:store is"
                            " refused, as no torchrun job outlives its store)"
                            " (default: kill,restart,preempt: those an elastic job is meant to survive)")
    check.add_argument("--compare", action="append", default=[], metavar="PATH",
                       help="a file both runs write (relative to the work directory) that must match (repeatable)")
    check.add_argument("--rtol", type=argparse_type(non_negative_float, "--rtol"), default=0.0, metavar="X",
                       help="relative tolerance of tensor and --compare-steps comparisons (default: 0, exactly equal)")
    check.add_argument("--compare-steps", action="store_true",
                       help="also compare the metrics the ranks report per step (report(step, loss=...)), or for a"
                            " script that reports none a digest of the parameters at each optimizer step, with the"
                            " undisturbed run's, at every step both reached, every attempt's included; the first"
                            " step that differs is named, and said where it is the first after a resume")
    check.add_argument("--trials", type=argparse_type(positive_int, "--trials"), default=1, metavar="K",
                       help="disturbed runs, with seeds SEED to SEED+K-1, against one undisturbed run; the check"
                            " holds only if every trial holds (default: 1)")
    check.add_argument("--max-steps-redone", type=argparse_type(non_negative_int, "--max-steps-redone"),
                       default=None, metavar="N",
                       help="fail a trial whose attempts redid more than N training steps in all, as a job that"
                            " starts over from a save the workers cannot see it load is not failed otherwise"
                            " (default: no bound)")
    chaos.set_defaults(handler=command, takes_target=True)


def command(args: argparse.Namespace, inv: Invocation) -> int:
    request = request_from_args(args, inv.target)
    install_teardown_signals()
    check = ChaosCheck(request, faults=args.fault_count, seed=args.seed, kinds=tuple(args.kinds),
                       compare=tuple(args.compare), rtol=args.rtol, trials=args.trials,
                       compare_steps=args.compare_steps, max_steps_redone=args.max_steps_redone, out=inv.out,
                       client=inv.client, command_line=inv.command_line, verbose=inv.verbose)
    result = check.run()
    inv.out.write(result.format() + "\n")
    return result.exit_code
