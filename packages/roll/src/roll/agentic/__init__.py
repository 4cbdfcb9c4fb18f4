"""Agentic RL: the iflow agent as the policy's scaffold, episodes in rock sandboxes."""
