"""Runs the command line of :mod:`jxai_app.core.streaming` (see its ``__main__``)."""

import sys

from jxai_app.core.streaming.__main__ import main

sys.exit(main())
