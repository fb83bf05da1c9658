"""memseal.Scope: a lifetime scope (C++ memseal::LifetimeScope) as a `with` block."""

import torch as _torch  # noqa: F401  (libtorch and its Python bindings before the core)

from . import _memseal
from ._api import ScopeLeakError
from ._options import apply_policy, check_policy, configure_python_frames, tracker_options


class Scope:
    """Nothing made inside the block may outlive it, except what is kept:

        with memseal.Scope("preprocess") as s:
            features = s.keep(normalize(image))   # moves to the enclosing scope
            cached = s.detach(lookup_table())     # leaves every scope's accounting

    Counts CPU tensor allocations made on this thread while the block runs (backward inside it
    counts too). When the block ends with survivors: on_survivors='raise' (the default) raises
    ScopeLeakError with the report, 'warn' prints it, 'callback' calls callback(report), 'none'
    only keeps it in .report. An exception leaving the block is never replaced by ScopeLeakError.
    Options stacks / watch_ops (observe_ops, its former name) / tensor_metadata / python_frames as
    for memseal.watch.
    """

    def __init__(self, name="scope", *, on_survivors="raise", callback=None, stacks=None,
                 watch_ops=None, tensor_metadata=None, python_frames=True, observe_ops=None):
        check_policy(on_survivors, callback, argument="on_survivors")
        self.name = name
        self.report = None
        self._on_survivors = on_survivors
        self._callback = callback
        self._options = tracker_options(python_frames=python_frames, stacks=stacks,
                                        watch_ops=watch_ops, observe_ops=observe_ops,
                                        tensor_metadata=tensor_metadata)
        self._python_frames = python_frames
        self._scope = None

    def __enter__(self):
        if self._scope is not None or self.report is not None:
            raise RuntimeError("memseal: a Scope is entered once")
        configure_python_frames(self._python_frames)
        self._scope = _memseal.Scope(self.name, self._options)
        return self

    def keep(self, tensor):
        """Declares that `tensor` outlives the block (it moves to the enclosing scope)."""
        self._open().keep(tensor)
        return tensor

    def detach(self, tensor):
        """Removes `tensor` from every scope's accounting."""
        self._open().detach(tensor)
        return tensor

    def __exit__(self, exc_type, exc, traceback):
        scope, self._scope = self._open(), None
        if exc_type is not None:
            scope.abandon()
            return False
        self.report = scope.close()
        if not self.report.clean:
            apply_policy(self._on_survivors, self.report, self._callback, ScopeLeakError)
        return False

    def _open(self):
        if self._scope is None:
            raise RuntimeError("memseal: this Scope is not open (use it as `with memseal.Scope(...)`)")
        return self._scope
