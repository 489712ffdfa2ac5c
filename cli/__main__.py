"""`python -m graphengine.cli ...`: the same as the `graphengine` command."""

import sys

from graphengine.cli.commands import main

sys.exit(main())
