"""Lists the packages under the four top-level folders that install as ``tecomp.*``."""
import os

from setuptools import setup

ROOTS = {"tecomp": "tecomp", "passes": "tecomp.passes", "solvers": "tecomp.solvers",
         "codegen": "tecomp.codegen"}


def _packages():
    found = []
    for folder, dotted in ROOTS.items():
        for dirpath, _dirs, files in os.walk(folder):
            if "__init__.py" in files:
                rel = os.path.relpath(dirpath, folder)
                found.append(dotted if rel == "." else dotted + "." + rel.replace(os.sep, "."))
    return sorted(found)


setup(packages=_packages())
