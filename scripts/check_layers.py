#!/usr/bin/env python3
"""Checks that no folder of src/ includes a folder above it (the order is that of
docs/developers/layout.md): common < track < analyze < detect, scope, plan, pool, explain < report,
compare < cli, inject, python. Folders of one level may include each other; include/memseal/ (the public headers) may be
included from anywhere. Exit 0 when every include keeps to the order, 1 listing those that do not.

    scripts/check_layers.py [SOURCE_ROOT]

Standard library only; scripts/test.sh runs it first."""

import re
import sys
from pathlib import Path

LAYERS = {
    "common": 0,
    "track": 1,
    "analyze": 2,
    "detect": 3, "scope": 3, "plan": 3, "pool": 3, "explain": 3,
    "report": 4, "compare": 4,
    "cli": 5, "inject": 5, "python": 5,
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.MULTILINE)


def violations(root):
    found = []
    for path in sorted((root / "src").rglob("*")):
        if path.suffix not in (".h", ".cpp", ".in") or not path.is_file():
            continue
        folder = path.relative_to(root / "src").parts[0]
        if folder not in LAYERS:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in INCLUDE.finditer(text):
            target = match.group(1)
            if target in LAYERS and LAYERS[target] > LAYERS[folder]:
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(root)}:{line}: {folder}/ (layer "
                             f"{LAYERS[folder]}) includes {target}/ (layer {LAYERS[target]})")
    return found


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    if not (root / "src").is_dir():
        print(f"check_layers: {root} has no src/ folder", file=sys.stderr)
        return 2
    found = violations(root)
    for violation in found:
        print(violation, file=sys.stderr)
    if found:
        print(f"check_layers: {len(found)} include(s) from a lower layer to a higher one",
              file=sys.stderr)
        return 1
    print("check_layers: every include keeps to the layer order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
