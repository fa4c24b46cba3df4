import sys

from orchestrate.cli.main import main

sys.exit(main())
