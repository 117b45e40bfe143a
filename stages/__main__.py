"""`python -m stages <request.json>`: one process of a training stage launched by accelerate or
torchrun (posttrain.training.launcher writes the request and reads the result)."""
import sys

from posttrain.training.launcher import run_launched

if __name__ == "__main__":
    sys.exit(run_launched(sys.argv[1]))
