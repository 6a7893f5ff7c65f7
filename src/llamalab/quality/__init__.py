"""What a configuration computes, against a baseline: KL divergence of a KV cache type (llama-perplexity), cached."""
