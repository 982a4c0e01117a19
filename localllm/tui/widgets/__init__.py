"""Reusable widgets of the TUI: the conversation, messages, prompt, attachments, sidebar,
status line."""
