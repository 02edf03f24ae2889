"""The window's own controls: prompt editor, status bar, model menus, run controls, intervention strip."""
