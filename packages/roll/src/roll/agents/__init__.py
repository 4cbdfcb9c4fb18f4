"""Third-party agents as ``ale.agents`` agents, so rock bench runs them and roll trains them
through its policy gateway (:mod:`roll.agents.mini_swe_agent`)."""
