"""Study files: the strict study model, presets (`presets/*.toml`, package data), and what a file may not ask for
without --trust-study."""
