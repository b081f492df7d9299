"""``python -m msop.integrations.agent``: see :mod:`.main`."""

import sys

from msop.integrations.agent.main import main

sys.exit(main())
