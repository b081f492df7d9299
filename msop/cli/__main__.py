"""``python -m msop.cli``."""

import sys

from msop.cli import main

sys.exit(main())
