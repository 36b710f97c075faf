"""Models: loading causal LMs and their tokenizers, devices and precision, LoRA adapters, chat-template prompts, OpenMP threads."""
