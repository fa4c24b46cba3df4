"""A user's script that writes lines in pieces, as progress bars do: a bar redrawn with "\r",
and a line printed in two parts. The pauses let torchrun's tee (which polls every 0.1 s)
copy each piece on its own, as it does with a real bar."""
import os
import sys
import time

rank = int(os.environ["RANK"])
for step in range(1, 4):
    sys.stdout.write(f"\rrank {rank} step {step}/3")
    sys.stdout.flush()
    time.sleep(0.4)
sys.stdout.write("\n")
print(f"rank {rank} half", end="", flush=True)
time.sleep(1.0)
print(" and the rest", flush=True)
