"""``python -m infrarsi`` with every run store it opens written down: each ``Store`` the process
builds appends its (masked) URL to the file ``COUNTED_STORES`` names. A test reads how many
handles one round of ``optimize`` opened on its ledger; nothing else changes."""

import os

from infrarsi import store

COUNTED_STORES = "INFRARSI_TEST_COUNTED_STORES"
_built = store.Store.__init__


def _counted(self: store.Store, url: str) -> None:
    _built(self, url)
    with open(os.environ[COUNTED_STORES], "a") as out:
        out.write(self.url + "\n")


if __name__ == "__main__":
    store.Store.__init__ = _counted  # type: ignore[method-assign]
    from infrarsi.cli import main

    main()
