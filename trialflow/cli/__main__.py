"""``python -m trialflow.cli``: the console script ``trialflow``."""

from __future__ import annotations

import sys

from trialflow.cli.commands import main

sys.exit(main())
