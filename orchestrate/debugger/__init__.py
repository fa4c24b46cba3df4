"""Debugging one rank from the host: which ranks stopped in their debugger (a script's
``breakpoint()``, ``pdb.set_trace()`` or ``torch.distributed.breakpoint()``), from what they said on
the progress channel (``states.py``, pure), and a terminal's session with one of them over the
socket it listens on in the run's ``debug/`` directory (``session.py``). May import
``plan.layout`` and the node package's debugger only."""

# What this package may import of the others, beside errors, text and interrupts (a package, or one
# module of it); tests/unit/test_import_contract.py holds every module to it.
MAY_IMPORT = ("plan.layout", "node.remote_debugger")
