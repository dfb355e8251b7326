"""The book's cases: one module per case (its claim checks and the numbers its page shows) beside its grid,
``<case>.yaml`` (engine configs × loads, read by ``run.plan``).

A case module registers the checks of its claims with the ledger (``claims.ledger.check``) when it is imported;
``register_checks`` imports every case module, so that the ledger knows every check. A new case is one module, one
YAML and one notebook: nothing else names it.
"""

from __future__ import annotations

import importlib
import pkgutil


def register_checks() -> None:
    """Import every case module of this package, registering its claim checks with the ledger."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
