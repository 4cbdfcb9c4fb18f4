"""The verifier's room: a task's tests run after its agent, and what they decided.

Below both the episode (:mod:`rock.episode`, which runs the verifier after every agent) and
the benchmark (:mod:`rock.bench`, which records it), so neither reaches into the other:
:mod:`~rock.verifier.run` stages the tests, runs them and reads the rewards;
:mod:`~rock.verifier.toolchain` is the offline toolchain they run with (pytest and its
plugins, and :mod:`~rock.verifier.shim`'s stand-ins for the tools that would download).
"""
