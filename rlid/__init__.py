"""rlid package."""
