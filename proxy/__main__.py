"""`python -m proxy` is `reasoning-proxy`."""

import sys

from proxy.cli import main

sys.exit(main())
