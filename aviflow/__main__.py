import sys

from aviflow.cli import main

sys.exit(main())
