"""Errors raised by the orchestrator.

Every error a user can cause or fix derives from :class:`OrchestrateError`; the CLI turns
them into a one-line message and an exit code, never a traceback. One rule for exit codes:
2 for bad input or a broken environment (no engine, no image, no GPU driver, a bring-up or
engine request that failed), 1 only for a job that ran and failed.
"""
from __future__ import annotations


class OrchestrateError(Exception):
    """Base class of every error the orchestrator raises on purpose."""

    exit_code: int = 1


class UsageError(OrchestrateError):
    """Raised when the request itself is invalid (bad option value, missing script)."""

    exit_code = 2


class NoSuchRunError(UsageError):
    """Raised when no run goes by the id given: in the engine, or in a runs directory.

    Attributes:
        in_middle: The run ids there that hold the id given in their middle, which names none.
    """

    def __init__(self, message: str, in_middle: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.in_middle = in_middle


class EngineUnavailableError(OrchestrateError):
    """Raised when no Docker engine answers, or Compose v2 cannot be found."""

    exit_code = 2


class ImageUnavailableError(OrchestrateError):
    """Raised when the node image is missing and cannot be built."""

    exit_code = 2


class ImageNotFoundError(ImageUnavailableError):
    """Raised when an image other than the default is neither in the engine nor pullable.

    Attributes:
        image: The image asked for.
        default: The image used when none is asked for.
        option: How the image was asked for (``--image``; ``--ddp-image`` in the pytest plugin):
            the option the advice tells the user to drop.
    """

    def __init__(self, image: str, default: str, option: str = "--image") -> None:
        self.image = image
        self.default = default
        self.option = option
        super().__init__(f"image {image} is not in the engine and cannot be pulled: build or pull it first, or"
                         f" drop {option} to use {default}")

    def named_by(self, option: str) -> "ImageNotFoundError":
        """The same error, for an image that ``option`` asked for."""
        return ImageNotFoundError(self.image, self.default, option)


class EngineError(OrchestrateError):
    """Raised when the engine refuses or fails a request (an API error, not a dead node)."""

    exit_code = 2


class ComposeError(OrchestrateError):
    """Raised when a ``docker compose`` command fails (bring-up or teardown).

    Attributes:
        command: The argv that failed.
        returncode: Its exit status.
        stderr: What it printed on stderr.
    """

    exit_code = 2

    def __init__(self, command: list[str], returncode: int, stderr: str) -> None:
        self.command = command
        self.returncode = returncode
        self.stderr = stderr
        last = next((ln for ln in reversed(stderr.strip().splitlines()) if ln.strip()), "")
        super().__init__(f"`{' '.join(command[:4])} ...` exited {returncode}: {last}")


class NodeLookupError(OrchestrateError):
    """Raised when the containers of a node cannot be found by their labels (zero or several)."""

    exit_code = 2


class NodesNotReadyError(OrchestrateError):
    """Raised when the nodes do not all resolve each other before the deadline."""

    exit_code = 2


class EngineLostError(EngineError):
    """Raised when the engine stops answering in the middle of a run."""


class RunDirError(OrchestrateError):
    """Raised when a run's directory cannot be made or written as the run starts (a full disk, a
    read-only file system, a path the system refuses)."""

    exit_code = 2


class LockTimeoutError(OrchestrateError):
    """Raised when another launch holds a host lock (the GPU lease, an image build) for too long."""

    exit_code = 2
