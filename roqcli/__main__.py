"""``python -m roqcli``: the ``roq`` command."""

import sys

from roqcli.main import main

sys.exit(main())
