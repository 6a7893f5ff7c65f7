"""The base modules every layer may use: errors, paths, records, safe text, statistics, and the only subprocess,
network and file-writing code.
"""
