"""Screens of the TUI: the chat, the model picker and the modal dialogs."""
