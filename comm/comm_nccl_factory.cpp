// NCCL build: the NCCL side of the communicator factory (placeholder).
