"""Calls on a module once it has been executed, shared by the bootstrap hooks: the challenge
seed, the framework's parameters and the observer may each need to wrap one module (``torch``),
and a meta path finder that returns a spec hides every finder after it, so there is one.

Standard library only; the finder finds nothing itself: it wraps the loader of each module a
hook asked for, once, and after the module's own code ran calls every hook's function on it.
"""

import importlib.abc
import importlib.machinery
import sys

_CALLS = {}  # module name -> [function(module)]


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.done = set()

    def find_spec(self, fullname, path, target=None):
        if fullname not in _CALLS or fullname in self.done:
            return None
        self.done.add(fullname)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_call(module):
            exec_module(module)
            for call in _CALLS[fullname]:
                call(module)

        spec.loader.exec_module = exec_and_call
        return spec


_FINDER = _AfterImport()


def after_import(name, call):
    """Call ``call(module)`` once the module ``name`` has been executed (at once where it
    already was)."""
    if name in sys.modules:
        call(sys.modules[name])
        return
    _CALLS.setdefault(name, []).append(call)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
