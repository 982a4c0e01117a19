"""Reusable widgets of the TUI: messages, prompt, sidebar, status line."""
