"""Training: the base-training stage, the epoch loop, the losses, where a process runs (device, precision,
threads) and resumable epoch checkpoints."""
