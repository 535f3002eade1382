"""Hardware and model registries, KV capacity and the pass timing models."""
