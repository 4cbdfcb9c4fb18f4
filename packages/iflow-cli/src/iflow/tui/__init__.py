"""The Textual TUI: ``iflow`` without ``-p``. :func:`iflow.tui.run.run_tui` starts it."""
