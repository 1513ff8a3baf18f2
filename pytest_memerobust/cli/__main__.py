"""`python -m pytest_memerobust.cli`: the `memerobust` command."""
import sys

from . import main

sys.exit(main())
