"""A challenge seed for a script that takes no seed parameter: every seed it sets is offset.

Standard library only; installed by the bootstrap hook in each rank when the harness sets
``INFRARSI_SEED_OFFSET``. The script's own calls — ``torch.manual_seed``, a
``torch.Generator``'s ``manual_seed``, ``random.seed``, ``numpy.random.seed`` and
``numpy.random.default_rng`` — run with ``seed + offset``: its initialisation and its data order
change as a seed parameter would change them, and the same offset gives the same run. The
wrapping is done when each module is first imported (an import hook), so the script's imports
are unchanged. Whether it took effect is for the harness to check (a candidate's initial
parameters must match its same-seed baseline's; baselines at two challenge seeds that began from
the same parameters and ran the same curve show it did not: ``verify.evidence.challenge_unseen``).
"""

import importlib.abc
import importlib.machinery
import os
import sys

ENV = "INFRARSI_SEED_OFFSET"


def _shift(offset, seed):
    if isinstance(seed, bool) or not isinstance(seed, int):
        return seed  # None (entropy), arrays, sequences: left as the script gave them
    return (seed + offset) % (2**63)


def _wrap(function, offset):
    def seeded(seed=None, *args, **kwargs):
        return function(_shift(offset, seed), *args, **kwargs)

    seeded.__wrapped__ = function
    seeded.__name__ = getattr(function, "__name__", "seed")
    return seeded


def _patch_torch(torch, offset):
    torch.manual_seed = _wrap(torch.manual_seed, offset)
    torch.random.manual_seed = torch.manual_seed
    base = torch.Generator

    class _SameType(type(base)):  # torch's own generators still pass isinstance checks
        def __instancecheck__(cls, obj):
            return isinstance(obj, base)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, base)

    class Generator(base, metaclass=_SameType):
        def manual_seed(self, seed):
            return base.manual_seed(self, _shift(offset, seed))

    Generator.__name__ = Generator.__qualname__ = "Generator"
    torch.Generator = Generator


def _patch_numpy(np, offset):
    np.random.seed = _wrap(np.random.seed, offset)
    np.random.default_rng = _wrap(np.random.default_rng, offset)


_PATCHES = {"torch": _patch_torch, "numpy": _patch_numpy}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of the modules it patches, once each."""

    def __init__(self, offset):
        self.offset, self.done = offset, set()

    def find_spec(self, fullname, path, target=None):
        if fullname not in _PATCHES or fullname in self.done:
            return None
        self.done.add(fullname)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader, offset = spec.loader, self.offset
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _PATCHES[fullname](module, offset)

        loader.exec_module = exec_and_patch
        return spec


def install():
    """Offset every seed the script sets, when the harness asks for it."""
    text = os.environ.get(ENV)
    if not text:
        return
    offset = int(text)
    import random

    random.seed = _wrap(random.seed, offset)
    sys.meta_path.insert(0, _AfterImport(offset))
