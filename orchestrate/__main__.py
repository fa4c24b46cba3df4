import signal
import sys

# Ctrl-C from the first moment: a launcher started in the background of a script (`cmd &`, no
# job control) inherits SIGINT ignored, and `kill -INT` in the quarter second of imports before
# the run command sets it (orchestrate/cli/signals.py) was lost: the run then went on to its end.
signal.signal(signal.SIGINT, signal.default_int_handler)
try:
    from orchestrate.cli.main import main
except KeyboardInterrupt:  # nothing started yet
    print("interrupted", file=sys.stderr)
    sys.exit(128 + signal.SIGINT)

sys.exit(main())
