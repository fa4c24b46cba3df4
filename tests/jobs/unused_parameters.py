"""A DDP model whose auxiliary head is used every other step, without
find_unused_parameters=True: DDP fails on every rank at the step after one that left the head out."""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.head = nn.Linear(8, 1)
        self.aux = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor, step: int) -> torch.Tensor:
        hidden = torch.relu(self.body(x))
        return self.head(hidden) if step % 2 == 0 else self.aux(hidden)


dist.init_process_group("gloo")
model = DistributedDataParallel(Net())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    loss = model(torch.randn(4, 8), step).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
