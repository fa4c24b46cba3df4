"""A user's script that writes lines in pieces, as progress bars do: a bar redrawn with "\r",
a line printed in two parts, then a bar as tqdm draws it (its clock made up, 20 s in 2). The
pauses let torchrun's tee (which polls every 0.1 s) copy each piece on its own, as it does with
a real bar."""
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
for n, elapsed in ((0, 0), (1, 4), (2, 12), (3, 15), (4, 20)):
    sys.stderr.write(f"\rtrain: {25 * n:3d}%|{'#' * n:<4}| {n}/4 [00:{elapsed:02d}<00:10,  0.20it/s]")
    sys.stderr.flush()
    time.sleep(0.4)
sys.stderr.write("\n")
