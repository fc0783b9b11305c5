"""``python -m console``: the same as the ``tripwire`` command."""

import sys

from console.cli import main

sys.exit(main())
