"""Distributed checks on torch.distributed (DESIGN §11): a target's training step over ranks and
gradient-accumulation micro-batches (``--partition RxM``), its vocabulary-parallel divergences
(``--shard-vocab K``). ``check`` judges, ``pool`` runs the rank processes, ``partitions`` splits."""
