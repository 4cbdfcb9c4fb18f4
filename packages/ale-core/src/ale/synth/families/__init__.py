"""The built-in task families: every module of this package registers its family when
imported, and importing the package imports them all."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
