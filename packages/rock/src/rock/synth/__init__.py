"""`rock synth`: the data synthesis pipeline of ale-core wired to rock sandboxes and agents."""
