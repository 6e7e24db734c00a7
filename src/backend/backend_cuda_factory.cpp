// CUDA build: placeholder until the backend seam lands.
