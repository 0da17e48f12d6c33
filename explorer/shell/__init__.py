"""The window around the panels: composition from the registry, menus, status bar, banner, dialogs, model loading, theme."""
