"""Readers of llama.cpp's output: the memory ledger of a load, the fit's dry run, `--list-devices`, refusals, and
`llamalab inspect`'s view of a ledger. Pure: lines in, records out.
"""
