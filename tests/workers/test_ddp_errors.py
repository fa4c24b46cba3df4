"""DDP's own errors under real torchrun, read by the judge as the summary reads them: torch's
words are what the hints match, so they are pinned against the torch installed here."""
from __future__ import annotations

import subprocess

from orchestrate.outcome.judge import Failure, unused_parameters_hint
from orchestrate.outcome.root_cause import exception_in_lines
from tests.workers.conftest import ROOT, hooked_torchrun, host_env

JOB = ROOT / "tests" / "jobs" / "unused_parameters.py"


def test_ddp_parameters_left_out_of_the_loss_are_named_in_the_hint_by_name_and_by_place(tmp_path):
    done = subprocess.run(hooked_torchrun(1, "--", str(JOB)), cwd=tmp_path, capture_output=True, text=True,
                          env=host_env(tmp_path, TORCH_DISTRIBUTED_DEBUG="INFO"), timeout=240)
    assert done.returncode != 0 and "step 0 loss" in done.stdout and "step 1 loss" not in done.stdout, done.stdout
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("[rank0]:")]  # the worker's, not torchrun's
    exception = exception_in_lines(lines)
    assert exception.startswith("RuntimeError: Expected to have finished reduction in the prior iteration"), exception

    def hint(last_lines):
        return unused_parameters_hint(Failure("node0", 0, 1, exception, tuple(last_lines)))

    assert hint(lines).startswith("  hint: DDP got no gradient for aux.bias, aux.weight (rank 0) in a step: "), hint(lines)
    without_names = [ln for ln in lines if "Parameters which did not receive grad" not in ln]
    assert hint(without_names).startswith("  hint: DDP got no gradient for the parameters at 4, 5 of"
                                          " model.parameters() (rank 0) in a step: "), hint(without_names)
