"""llama.cpp itself: its source and builds, given binaries, models and stand-ins, llama-server and llama-bench
argument lists, and the pure readers of what it prints (ledger, memory, budgets, device lists)."""
