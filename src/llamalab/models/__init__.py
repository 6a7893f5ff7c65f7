"""Models: synthetic GGUF models, the GGUF header, header-only stand-ins, packaged models, and `models/remote/` (hf://,
https://, ollama:// references read by Range requests).
"""
