"""``python -m tfgrpo_dspy.cli``: the ``tfgrpo`` command without its console script."""

import sys

from tfgrpo_dspy.cli import main

sys.exit(main())
