"""``python -m cortex`` runs the ``cortex`` command (see :mod:`cortex.cli`)."""

import sys

from cortex.cli import main

sys.exit(main())
