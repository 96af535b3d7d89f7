"""`python -m rtinfer.cli`: the same as the `rtinfer` command."""

import sys

from rtinfer.cli import main

sys.exit(main())
