"""The results database (SQLite), its row models, run ids, run ownership, and the JSON export/import of a run."""
