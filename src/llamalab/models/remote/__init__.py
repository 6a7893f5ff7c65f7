"""Remote models: what a reference names (ref), where its bytes are (source), and Range reads (rangeio)."""
