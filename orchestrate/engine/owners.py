"""Who launched a run, so that commands over many runs (``ps --mine``, ``prune``) touch only the
caller's on an engine that several users share, unless told otherwise."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Union

from orchestrate.engine.labels import OWNER_LABEL, OWNER_NAME_LABEL
from orchestrate.engine.remains import RunRemains
from orchestrate.engine.runs import RunInfo


@dataclass(frozen=True)
class RunOwner:
    """The user who launched a run.

    Attributes:
        uid: Their uid; None where nothing says (no owner label, and no run directory this
            process can look at).
        name: Their login name ("" where it is not known).
    """

    uid: Optional[int]
    name: str = ""

    @property
    def shown(self) -> str:
        """The name, else the uid, else ``unknown``."""
        return self.name or ("unknown" if self.uid is None else str(self.uid))

    @property
    def described(self) -> str:
        """``user NAME`` (or uid), or ``an unknown user``."""
        return "an unknown user" if self.uid is None else f"user {self.shown}"

    def launched_by(self, caller: Optional[int]) -> bool:
        """Whether this is the user ``caller`` (everyone is where the OS has no uids, None); an
        unknown owner is nobody."""
        return caller is None or self.uid == caller


def caller_uid() -> Optional[int]:
    """The uid of this process (None where the OS has no uids: every run is then the caller's)."""
    return os.getuid() if hasattr(os, "getuid") else None


def run_owner(run: Union[RunInfo, RunRemains]) -> RunOwner:
    """Who launched ``run`` (or the run that left ``run``): its owner labels; for a run started
    before them, the owner of its directory where this process can look at it (the launcher made it
    as its user), else unknown."""
    uid_text = run.labels.get(OWNER_LABEL, "")
    if uid_text.isdigit():
        return RunOwner(int(uid_text), run.labels.get(OWNER_NAME_LABEL, ""))
    if not run.run_dir.name:
        return RunOwner(None)
    try:
        uid = run.run_dir.stat().st_uid
    except OSError:  # gone, or behind a directory this user may not enter
        return RunOwner(None)
    return RunOwner(uid, login_name(uid))


def login_name(uid: int) -> str:
    """The login name of ``uid`` on this host ("" where it has none)."""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return ""


def others_note(run: Union[RunInfo, RunRemains], caller: Optional[int]) -> str:
    """`` (run of user NAME)`` for a run that another user launched, `` (run of an unknown user)``
    for one whose owner nothing says; "" for the caller's own."""
    owner = run_owner(run)
    return "" if owner.launched_by(caller) else f" (run of {owner.described})"
