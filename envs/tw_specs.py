"""TextWorld env ids (registered on import; textworld itself is imported lazily)."""
