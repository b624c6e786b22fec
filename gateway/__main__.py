"""``python -m gateway`` is the ``gateway`` command (as ``python -m gateway.cli``)."""

import sys

from gateway.cli import main

sys.exit(main())
