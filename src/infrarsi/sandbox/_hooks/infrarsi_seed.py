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

import os

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


def install():
    """Offset every seed the script sets, when the harness asks for it."""
    from infrarsi_after import after_import  # beside this file, on the hooks' path

    text = os.environ.get(ENV)
    if not text:
        return
    offset = int(text)
    import random

    random.seed = _wrap(random.seed, offset)
    for name, patch in _PATCHES.items():
        after_import(name, lambda module, patch=patch: patch(module, offset))
