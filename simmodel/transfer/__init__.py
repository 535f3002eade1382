"""Moving a request's KV cache from a prefill worker to a decode worker."""
