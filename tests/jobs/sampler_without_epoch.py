"""Two classic mistakes, written as a user would, that fail nothing: a shuffling
DistributedSampler never told its epoch (every epoch reads the data in the same order), and
every rank saving the checkpoint to one shared file (the writers race in it)."""
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
sampler = DistributedSampler(data, shuffle=True)
loader = DataLoader(data, batch_size=8, sampler=sampler)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    for x, y in loader:  # MISTAKE: no sampler.set_epoch(epoch) before it
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.save(model.module.state_dict(), "ckpt.pt")  # MISTAKE: on every rank
print("done", flush=True)
dist.destroy_process_group()
