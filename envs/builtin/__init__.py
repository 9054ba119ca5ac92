"""Built-in pure-Python text games (registered on import)."""
