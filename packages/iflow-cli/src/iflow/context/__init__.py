"""Context engineering: token accounting, compression, memory files and loop detection."""
