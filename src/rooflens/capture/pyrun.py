"""Run a script in this interpreter's ``__main__`` exactly as ``python script.py`` / ``python -m module``
would: its ``sys.argv``, ``sys.path[0]``, globals and code object. Standard library only (the
launcher, :mod:`rooflens.capture.launch`, loads it by path before the script runs)."""

from __future__ import annotations

import os
import sys


def run(mode: str, target: str) -> None:
    import builtins
    import runpy

    main = sys.modules["__main__"]
    if mode == "module":
        sys.path[0] = os.getcwd()
        sys.argv[0] = "-m"
        main.__dict__.clear()
        main.__dict__.update({"__name__": "__main__", "__builtins__": builtins})
        runpy._run_module_as_main(target, alter_argv=True)
        return
    path = os.path.abspath(target)
    if os.path.isdir(path) or not path.endswith((".py", ".pyw")) and is_zip(path):
        del sys.path[0]
        runpy.run_path(target, run_name="__main__")
        return
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    import importlib.machinery as m

    with open(path, "rb") as fh:
        source = fh.read()
    code = compile(source, path, "exec", dont_inherit=True)
    g = main.__dict__
    g.clear()
    g.update({"__name__": "__main__", "__doc__": None, "__package__": None, "__spec__": None,
              "__loader__": m.SourceFileLoader("__main__", path), "__file__": path, "__cached__": None,
              "__builtins__": builtins, "__annotations__": {}})
    exec(code, g)


def is_zip(path: str) -> bool:
    import zipfile

    return os.path.isfile(path) and zipfile.is_zipfile(path)
