"""llamalab: measure what a llama.cpp build option or runtime flag costs in memory and buys in speed."""

__version__ = "0.1.0"
