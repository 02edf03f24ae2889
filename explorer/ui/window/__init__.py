"""The main window and what only it hosts: docks, menus, the window state, exports, chrome."""
