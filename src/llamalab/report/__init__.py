"""Reports: pure renderers over a `RunData` loaded from the store; the CLI writes what they return (core/write.py)."""
