"""File formats every layer shares: atomic writes, format versions, the corpus file (light enough for the machine
presets to read a corpus machine's profile)."""
