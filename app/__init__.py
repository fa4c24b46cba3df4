"""DDP worker programs: plain torchrun programs (``torchrun ... -m app.NAME``)."""
