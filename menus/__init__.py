"""menus package."""
