"""``python -m datatools``: the same as the ``datatools`` command."""

import sys

from datatools.cli import main

sys.exit(main())
