"""Hardware detection: ggml devices via a probe child, CPU/RAM facts, driver probes for GPUs."""
