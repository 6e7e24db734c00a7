// Build without NCCL: placeholder until the communicator seam lands.
