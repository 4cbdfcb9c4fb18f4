"""rock bench: Terminal-Bench 1.0 and 2.0 tasks run offline with any agent.

:mod:`~rock.bench.images` builds task images (base-image map, digest cache),
:mod:`~rock.bench.agents` holds ``oracle``, ``nop`` and the command recorder,
:mod:`~rock.bench.harness` runs trials (each an episode of :mod:`rock.episode` in the
sandbox :mod:`~rock.bench.trial_env` gives it, its tests run by :mod:`rock.verifier`), and
:mod:`~rock.bench.results` records them.
"""
