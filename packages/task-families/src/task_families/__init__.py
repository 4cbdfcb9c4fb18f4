"""The built-in task families of the ecosystem, apart from ale-core's contracts: every module
of this package registers its family when imported, and importing the package (what the
``ale.task_families`` entry point names) imports them all."""

import importlib
import pkgutil

__version__ = "0.1.0"

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
