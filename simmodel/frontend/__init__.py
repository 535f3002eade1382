"""The HTTP frontend in front of the scheduler: tokenizer, processor and multimodal stages."""
