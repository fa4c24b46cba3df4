"""A pipeline hand-off one short, written as a user would meet it: rank 0 sends 5 micro-batches
while rank 1 was told to expect 4, then both all-reduce. Rank 0 waits in its fifth send, rank 1
in the all-reduce. Plain torch; it reports no steps."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
x = torch.zeros(8)
if dist.get_rank() == 0:
    for micro_batch in range(5):
        dist.send(x + micro_batch, dst=1)  # SEND
else:
    for micro_batch in range(4):
        dist.recv(x, src=0)
dist.all_reduce(x)  # ALL_REDUCE
dist.destroy_process_group()
