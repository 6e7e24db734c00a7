// CPU-only build: placeholder until the backend seam lands.
