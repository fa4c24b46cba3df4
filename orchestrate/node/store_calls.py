"""The calls a worker's script makes on a ``torch.distributed`` store itself: the keys it set, the
key(s) a ``get`` or ``wait`` of it is blocked on, and the ``TCPStore`` objects it made (host, port,
whether it is the master). A rank that waits for a key no rank set (a typo), or for a ``TCPStore``
on its own node's ``localhost``, is told why from them (:mod:`orchestrate.hangs.store_calls`). A
call that raises (the script's own store timeout, shorter than ``--hang-timeout``) is kept, cheaply
(the error's identity and the wait it ended), and said in the rank's record only where that error
ends the process (:meth:`StoreRecord.dying_of`, from the worker's own end): a script that catches
it and polls again pays nothing, and its record is not one of a dying rank.

``Store``'s methods are one pybind class's (``TCPStore``, ``PrefixStore``, ``FileStore`` and
``HashStore`` define none of their own), and a pybind class takes Python attributes: they are
wrapped there, as is ``TCPStore.__init__``. Only the script's own calls are kept (those whose
caller is not torch's code): torch's rendezvous makes and fills its stores from C++, or from its
own Python files, which never count. Recording never raises into the script. Standard library only.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

# The distinct keys kept per rank: past them the record says so, and no key is said unset.
KEYS_KEPT = 64
KEY_CHARS = 200
_TORCH_FILES = os.sep + "torch" + os.sep
# The Store methods that set a key, and those that block until their keys exist (by name: the
# key's argument, and whether it holds a list of keys).
SETTERS = {"set": "key", "add": "key", "compare_set": "key", "multi_set": "keys"}
WAITERS = {"get": "key", "wait": "keys", "multi_get": "keys"}
TCP_STORE_ARGS = ("host_name", "port", "world_size", "is_master")


def users_call(frame: Any) -> bool:
    """Whether ``frame`` (a store method's caller) is the script's: not torch's code, nor the hook's."""
    from orchestrate.node.hook_frames import is_hook_file

    filename = frame.f_code.co_filename if frame is not None else ""
    return bool(filename) and _TORCH_FILES not in filename and not is_hook_file(filename)


def where(frame: Any) -> str:
    from orchestrate.node.collective_log import relative

    return f"{relative(frame.f_code.co_filename)}:{frame.f_lineno}"


def key_list(value: Any) -> List[str]:
    """A call's key argument as keys: one, or the list ``wait`` and ``multi_get`` take."""
    values = value if isinstance(value, (list, tuple)) else [value]
    return [(v.decode(errors="replace") if isinstance(v, bytes) else str(v))[:KEY_CHARS] for v in values]


class StoreRecord:
    """One process's record of its script's store calls (see the module's text)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # the last call that raised: its error's id and words, and the wait it ended
        self.failed: Optional[Tuple[int, str, Dict[str, Any]]] = None
        self.dying_in: Optional[Dict[str, Any]] = None  # that wait, where its error ends the process
        self.keys_set: Dict[str, None] = {}  # in the order first set
        self.more_keys = False  # keys past KEYS_KEPT were set too
        self.waiting: Dict[int, Dict[str, Any]] = {}  # thread ident -> the call it is blocked in
        self.tcp_stores: List[Dict[str, Any]] = []

    def set_keys(self, keys: List[str]) -> None:
        with self.lock:
            for key in keys:
                if key in self.keys_set:
                    continue
                if len(self.keys_set) >= KEYS_KEPT:
                    self.more_keys = True
                    return
                self.keys_set[key] = None

    def begin_wait(self, call: str, keys: List[str], at: str) -> None:
        with self.lock:
            self.waiting[threading.get_ident()] = {"call": call, "keys": keys[:8], "at": at}

    def end_wait(self) -> None:
        with self.lock:
            self.waiting.pop(threading.get_ident(), None)

    def raised(self, error: BaseException) -> None:
        """The calling thread's store call raised ``error``: keep which, and the wait it ended
        (no reference to the error: its traceback holds the script's frames)."""
        with self.lock:
            wait = self.waiting.get(threading.get_ident())
            if wait is not None:
                self.failed = (id(error), str(error)[:200], dict(wait))

    def dying_of(self, error: BaseException) -> bool:
        """Whether ``error``, which ends the process, is the last store call's that raised (or
        was raised from it, or while handling it); then :meth:`snapshot` says that call as
        still waited in."""
        with self.lock:
            if self.failed is None:
                return False
            seen, found = set(), error
            while found is not None and id(found) not in seen:
                if (id(found), str(found)[:200]) == self.failed[:2]:
                    self.dying_in = self.failed[2]
                    return True
                seen.add(id(found))
                found = found.__cause__ or found.__context__
            return False

    def made_tcp_store(self, store: Dict[str, Any]) -> None:
        with self.lock:
            self.tcp_stores = (self.tcp_stores + [store])[-4:]

    def snapshot(self) -> Optional[Dict[str, Any]]:
        """The record as a snapshot holds it; None where the script made no store call."""
        with self.lock:
            if not (self.keys_set or self.waiting or self.tcp_stores or self.dying_in):
                return None
            main = threading.main_thread().ident
            waits = sorted(self.waiting.items(), key=lambda item: item[0] != main)  # the main thread's first
            dying = [dict(self.dying_in)] if self.dying_in is not None else []
            return {"keys_set": list(self.keys_set), "more_keys": self.more_keys,
                    "waiting": dying + [dict(call) for _, call in waits],
                    "tcp_stores": [dict(s) for s in self.tcp_stores]}


def quietly(record: Callable[..., None], *args: Any) -> None:
    try:
        record(*args)
    except Exception:  # an argument torch will refuse with its own words: nothing to keep
        pass


def setter(original: Callable[..., Any], record: StoreRecord, argument: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if users_call(sys._getframe(1)):
            quietly(lambda: record.set_keys(key_list(args[0] if args else kwargs[argument])))
        return original(self, *args, **kwargs)

    return call


def waiter(original: Callable[..., Any], record: StoreRecord, name: str, argument: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1)
        if not users_call(caller):
            return original(self, *args, **kwargs)
        quietly(lambda: record.begin_wait(name, key_list(args[0] if args else kwargs[argument]), where(caller)))
        try:
            return original(self, *args, **kwargs)
        except Exception as error:
            quietly(record.raised, error)
            raise
        finally:
            quietly(record.end_wait)

    return call


def tcp_store_init(original: Callable[..., Any], record: StoreRecord) -> Callable[..., Any]:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        caller = sys._getframe(1)
        if not users_call(caller):
            return original(self, *args, **kwargs)

        def keep() -> None:
            given = {**dict(zip(TCP_STORE_ARGS, args)), **{k: v for k, v in kwargs.items() if k in TCP_STORE_ARGS}}
            at = where(caller)
            record.made_tcp_store({"host": str(given.get("host_name", "")), "port": int(given.get("port", 0)),
                                   "world_size": None if given.get("world_size") is None else int(given["world_size"]),
                                   "is_master": bool(given.get("is_master", False)), "at": at})
            record.begin_wait("TCPStore", [], at)

        quietly(keep)
        try:
            return original(self, *args, **kwargs)
        except Exception as error:
            quietly(record.raised, error)
            raise
        finally:
            quietly(record.end_wait)

    return __init__


def install(record: StoreRecord) -> None:
    """Wrap ``torch.distributed.Store``'s methods and ``TCPStore.__init__`` (once)."""
    dist = sys.modules["torch.distributed"]
    store, tcp_store = dist.Store, dist.TCPStore
    if getattr(store.set, "__ddp_compose_store_recorded__", False):
        return
    for name, argument in SETTERS.items():
        if hasattr(store, name):
            setattr(store, name, setter(getattr(store, name), record, argument))
    for name, argument in WAITERS.items():
        if hasattr(store, name):
            setattr(store, name, waiter(getattr(store, name), record, name, argument))
    tcp_store.__init__ = tcp_store_init(tcp_store.__init__, record)
    store.set.__ddp_compose_store_recorded__ = True
