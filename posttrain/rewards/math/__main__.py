"""``python -m posttrain.rewards.math``: verify_stream over stdin to stdout; exit status 1 when any
line was bad input."""
import sys

from posttrain.rewards.math import verify_stream

sys.exit(1 if verify_stream(sys.stdin.buffer, sys.stdout.buffer)["bad_input"] else 0)
