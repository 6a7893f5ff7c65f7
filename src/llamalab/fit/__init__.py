"""The fit arithmetic: budgets emulated as llama.cpp's free memory, the largest context within limits, and the search
for contexts within every budget.
"""
