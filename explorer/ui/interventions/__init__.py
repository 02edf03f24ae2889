"""The session's interventions in the app: the shared state, the right-click menus and marks.

state.py   InterventionState: the list the user built (each on or off), a signal when it changes
menu.py    right-click "Switch off (zero)" / "Mean-ablate" / "Clear" on a plot, and the marks over
           switched-off components
"""
