// NCCL build: placeholder until the communicator seam lands.
