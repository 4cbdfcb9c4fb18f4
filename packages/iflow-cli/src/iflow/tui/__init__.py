"""The Textual TUI: ``iflow`` without ``-p``. :func:`iflow.tui.app.run_tui` starts it."""
