"""python -m memseal check ...: see memseal._cli."""

import sys

from ._cli import main

sys.exit(main())
