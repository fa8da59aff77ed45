"""The supported families, one module each; importing this package registers them all.

Adding a family is one new module here (it builds its `frameshard.hf._family.Family` and calls
`register`) and its tests: every module of this package is imported, in name order."""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module("%s.%s" % (__name__, _module))
