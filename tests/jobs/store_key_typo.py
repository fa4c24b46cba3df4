"""A rank that waits for a store key no rank sets, written as a user would: rank 0 says the data
set is ready in the job's own store, and rank 1 waits for the key misspelled (``datasetready``),
so it waits until the store's timeout while rank 0 waits for it in a barrier."""
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store

dist.init_process_group("gloo")
store = _get_default_store()
if dist.get_rank() == 0:
    store.set("dataset_ready", "1")
else:
    store.wait(["datasetready"])  # TYPO: rank 0 set "dataset_ready"
dist.barrier()
dist.destroy_process_group()
