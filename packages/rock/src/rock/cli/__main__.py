"""``python -m rock.cli``: the same as the ``rock`` command."""

from rock.cli import main

if __name__ == "__main__":
    main()
