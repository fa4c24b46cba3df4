"""ddp-compose's launcher: run torchrun jobs across simulated nodes (Docker Compose).

Library API: build a :class:`RunConfig`, plan it with :func:`make_plan`, carry it out with
:func:`launch`. The CLI (``python -m orchestrate``) is a thin layer over these. This
package never imports torch.
"""
from orchestrate.config import RunConfig
from orchestrate.plan import JobPlan, NodePlan, make_plan

__all__ = ["RunConfig", "JobPlan", "NodePlan", "make_plan", "launch"]


def __getattr__(name: str):
    # The launcher pulls in the docker SDK; import it only when it is used.
    if name == "launch":
        from orchestrate.launcher import launch

        return launch
    raise AttributeError(name)
