"""The rock daemon: `rock serve` (FastAPI + uvicorn) over a `SandboxManager`."""
