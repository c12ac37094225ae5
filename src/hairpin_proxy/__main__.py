import sys

from hairpin_proxy.cli import main

sys.exit(main())
