"""A pipeline hand-off one short, written as a user would meet it: the two ranks exchange a
tensor in one batch, then rank 0 sends 5 micro-batches while rank 1 was told to expect 4 (the
first received from whichever rank sends), then both all-reduce. Rank 0 waits in its fifth
send, rank 1 in the all-reduce. Plain torch; it reports no steps."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, x = dist.get_rank(), torch.zeros(8)
mine, theirs = torch.full((2,), float(rank)), torch.zeros(2)
for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, 1 - rank), dist.P2POp(dist.irecv, theirs, 1 - rank)]):
    work.wait()
if rank == 0:
    for micro_batch in range(5):
        dist.send(x + micro_batch, dst=1)  # SEND
else:
    dist.recv(x)  # from any rank
    for micro_batch in range(3):
        dist.recv(x, src=0)
dist.all_reduce(x)  # ALL_REDUCE
dist.destroy_process_group()
