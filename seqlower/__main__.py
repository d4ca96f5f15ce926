import sys

from seqlower.cli import main

sys.exit(main())
