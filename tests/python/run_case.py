"""A `memseal check` case run as a plain program, for `memseal run`: the file is loaded as
`python -m memseal check` loads it (a module of its own in sys.modules, its folder first on the
path), its setup() called when it has one, then step(i) in a loop, as the program's own loop.

    memseal run -- python tests/python/run_case.py CASE.py --steps 300
"""
import argparse
import importlib.util
import os
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    path = os.path.abspath(args.case)
    name = "memseal_case_" + "".join(c if c.isalnum() else "_" for c in os.path.basename(path))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, os.path.dirname(path))
    spec.loader.exec_module(module)
    if hasattr(module, "setup"):
        module.setup()
    for i in range(args.steps):
        module.step(i)


if __name__ == "__main__":
    main()
