"""`python -m graphengine.cli ...`: the same as the `graphengine` command."""

import sys

from graphengine.cli.main import main

sys.exit(main())
