"""Reports: pure renderers over a `RunData` loaded from the store; `write.py` is the one place that writes files."""
