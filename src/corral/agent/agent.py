"""Run the agent from the source tree: ``python -I -S agent.py`` (the unit tests do).

A sandbox runs the one-file build of this package instead (``corral.runtime.inject``), which
imports the same modules as the package ``agent`` and calls the same ``main``. Here the
directory above this one goes first on ``sys.path`` so that the package is imported as ``agent``
too: ``-I`` leaves the script's own directory off ``sys.path``, and importing the package as
``corral.agent`` would import ``corral`` (the SDK).
"""

import sys

sys.path.insert(0, __file__.rpartition("/")[0].rpartition("/")[0])

from agent.main import main

sys.exit(main())
